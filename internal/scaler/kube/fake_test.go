//go:build kubernetes

package kube

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// fakeCluster is an API server speaking the pods API as kube-apiserver
// does on the wire — JSON objects with kind and apiVersion, errors as
// metav1.Status with the HTTP code, resource versions, a watch as a
// chunked stream of {"type","object"} lines, a log as a text stream — and
// a one-node "kubelet" (kubelet_test.go) that runs each pod's agent
// container as a real process. It is not a cluster: no scheduler beyond
// a CPU count, no images beyond the table it is given, no namespaces
// beyond its list.
type fakeCluster struct {
	t     *testing.T
	srv   *httptest.Server
	token string
	// Namespaces that exist.
	Namespaces []string
	// Images maps an image to the kiln binary its `kiln` is ("" for an
	// image without kiln); other images cannot be pulled.
	Images map[string]string
	// NodeMilliCPU is what the node can schedule.
	NodeMilliCPU int64

	mu      sync.Mutex
	rv      int64
	pods    map[string]*fakePod // by namespace/name
	events  []fakeEvent
	changed chan struct{}
	closing chan struct{}
	wg      sync.WaitGroup
	// Requests counts the requests by method and path pattern.
	Requests map[string]int
}

type fakeEvent struct {
	rv  int64
	typ watch.EventType
	pod *corev1.Pod
}

func newFakeCluster(t *testing.T) *fakeCluster {
	f := &fakeCluster{t: t, token: "fake-token-" + uuid.NewString()[:8], Namespaces: []string{"default", "kiln-ci"},
		Images: map[string]string{}, NodeMilliCPU: 4000, pods: map[string]*fakePod{},
		changed: make(chan struct{}), closing: make(chan struct{}), Requests: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/pods", f.create)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods", f.list)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}", f.get)
	mux.HandleFunc("DELETE /api/v1/namespaces/{ns}/pods/{name}", f.delete)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}/log", f.log)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
	})
	// TLS, as a real API server: client-go sends a kubeconfig's
	// credentials to https servers only.
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			t.Logf("fake API: %s %s with Authorization %q: 401", r.Method, r.URL, r.Header.Get("Authorization"))
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized", nil)
			return
		}
		// kube-apiserver also speaks protobuf (client-go's default for
		// pods); this fake speaks JSON only and says so, as the server
		// does for a media type it does not serve.
		if accept := r.Header.Get("Accept"); accept != "" && !strings.Contains(accept, "application/json") && !strings.Contains(accept, "*/*") {
			writeStatus(w, http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, "only the following media types are accepted: application/json", nil)
			return
		}
		if ct := r.Header.Get("Content-Type"); r.ContentLength != 0 && r.Body != http.NoBody && ct != "" && !strings.HasPrefix(ct, "application/json") {
			writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: application/json", nil)
			return
		}
		_, pattern := mux.Handler(r)
		f.mu.Lock()
		f.Requests[pattern]++
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.close)
	return f
}

// Kubeconfig writes a kubeconfig for the fake (its CA, a bearer token,
// namespace kiln-ci) and returns its path.
func (f *fakeCluster) Kubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: kiln
  user: {token: %q}
contexts:
- name: fake
  context: {cluster: fake, user: kiln, namespace: kiln-ci}
current-context: fake
`, f.srv.URL, base64.StdEncoding.EncodeToString(ca), f.token)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// close stops the watches and the kubelet's processes, then the server.
func (f *fakeCluster) close() {
	close(f.closing)
	f.mu.Lock()
	for _, p := range f.pods {
		p.kill()
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.srv.Close()
}

// Pods returns copies of the pods of a namespace, by name.
func (f *fakeCluster) Pods(ns string) map[string]*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*corev1.Pod{}
	for _, p := range f.pods {
		if p.pod.Namespace == ns {
			out[p.pod.Name] = p.pod.DeepCopy()
		}
	}
	return out
}

// record stores a change of a pod as the next resource version and wakes
// the watches; the caller holds f.mu.
func (f *fakeCluster) record(typ watch.EventType, pod *corev1.Pod) {
	f.rv++
	pod.ResourceVersion = strconv.FormatInt(f.rv, 10)
	f.events = append(f.events, fakeEvent{rv: f.rv, typ: typ, pod: pod.DeepCopy()})
	close(f.changed)
	f.changed = make(chan struct{})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers an error as kube-apiserver does: a v1 Status.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: msg, Reason: reason, Details: details, Code: int32(code)})
}

func notFound(w http.ResponseWriter, name string) {
	writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name),
		&metav1.StatusDetails{Name: name, Kind: "pods"})
}

func (f *fakeCluster) create(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if !slices.Contains(f.Namespaces, ns) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("namespaces %q not found", ns),
			&metav1.StatusDetails{Name: ns, Kind: "namespaces"})
		return
	}
	var pod corev1.Pod
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pod); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the body of the request was in an unknown format: "+err.Error(), nil)
		return
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("the API version in the data (%s) does not match the expected API version (v1)", pod.APIVersion), nil)
		return
	}
	var invalid []string
	if pod.Name == "" {
		invalid = append(invalid, "metadata.name: Required value: name or generateName is required")
	}
	if len(pod.Spec.Containers) == 0 {
		invalid = append(invalid, "spec.containers: Required value")
	}
	for i, c := range pod.Spec.Containers {
		if c.Image == "" {
			invalid = append(invalid, fmt.Sprintf("spec.containers[%d].image: Required value", i))
		}
	}
	if len(invalid) > 0 {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("Pod %q is invalid: %s", pod.Name, strings.Join(invalid, ", ")), &metav1.StatusDetails{Name: pod.Name, Kind: "Pod"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + pod.Name
	if f.pods[key] != nil {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, fmt.Sprintf("pods %q already exists", pod.Name),
			&metav1.StatusDetails{Name: pod.Name, Kind: "pods"})
		return
	}
	pod.Namespace, pod.UID, pod.CreationTimestamp = ns, types.UID(uuid.NewString()), metav1.Now()
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	p := &fakePod{f: f, pod: &pod, log: newLogBuf(), done: make(chan struct{})}
	f.pods[key] = p
	f.record(watch.Added, &pod)
	writeJSON(w, http.StatusCreated, &pod)
	f.wg.Go(p.run)
}

func (f *fakeCluster) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	p := f.pods[r.PathValue("ns")+"/"+r.PathValue("name")]
	var pod *corev1.Pod
	if p != nil {
		pod = p.pod.DeepCopy()
	}
	f.mu.Unlock()
	if pod == nil {
		notFound(w, r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, pod)
}

// selectors reads labelSelector and fieldSelector (metadata.name and
// metadata.namespace, as the API server supports them for pods).
func selectors(r *http.Request) (labels.Selector, fields.Selector, error) {
	ls, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		return nil, nil, err
	}
	fs, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		return nil, nil, err
	}
	for _, req := range fs.Requirements() {
		if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
			return nil, nil, fmt.Errorf("field label not supported: %s", req.Field)
		}
	}
	return ls, fs, nil
}

func matches(pod *corev1.Pod, ns string, ls labels.Selector, fs fields.Selector) bool {
	return pod.Namespace == ns && ls.Matches(labels.Set(pod.Labels)) &&
		fs.Matches(fields.Set{"metadata.name": pod.Name, "metadata.namespace": pod.Namespace})
}

func (f *fakeCluster) list(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	ls, fs, err := selectors(r)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
		return
	}
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		f.watch(w, r, ns, ls, fs)
		return
	}
	f.mu.Lock()
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(f.rv, 10)}, Items: []corev1.Pod{}}
	for _, p := range f.pods {
		if matches(p.pod, ns, ls, fs) {
			list.Items = append(list.Items, *p.pod.DeepCopy())
		}
	}
	f.mu.Unlock()
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, &list)
}

// watch streams the changes after resourceVersion (unset or "0": the
// matching pods as ADDED first), one JSON event per line, flushed, until
// timeoutSeconds, the client leaving or the fake closing.
func (f *fakeCluster) watch(w http.ResponseWriter, r *http.Request, ns string, ls labels.Selector, fs fields.Selector) {
	var timeout <-chan time.Time
	if s := r.URL.Query().Get("timeoutSeconds"); s != "" {
		n, _ := strconv.Atoi(s)
		t := time.NewTimer(time.Duration(n) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	fl := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(typ watch.EventType, pod *corev1.Pod) bool {
		raw, _ := json.Marshal(pod)
		return enc.Encode(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}) == nil
	}
	f.mu.Lock()
	rv, _ := strconv.ParseInt(r.URL.Query().Get("resourceVersion"), 10, 64)
	var initial []*corev1.Pod
	if rv == 0 {
		rv = f.rv
		for _, p := range f.pods {
			if matches(p.pod, ns, ls, fs) {
				initial = append(initial, p.pod.DeepCopy())
			}
		}
	}
	next := slices.IndexFunc(f.events, func(e fakeEvent) bool { return e.rv > rv })
	if next < 0 {
		next = len(f.events)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	for _, pod := range initial {
		send(watch.Added, pod)
	}
	fl.Flush()
	for {
		f.mu.Lock()
		evs := f.events[next:]
		next = len(f.events)
		ch := f.changed
		f.mu.Unlock()
		for _, e := range evs {
			if matches(e.pod, ns, ls, fs) && !send(e.typ, e.pod) {
				return
			}
		}
		fl.Flush()
		select {
		case <-ch:
		case <-timeout:
			return
		case <-r.Context().Done():
			return
		case <-f.closing:
			return
		}
	}
}

func (f *fakeCluster) delete(w http.ResponseWriter, r *http.Request) {
	var opts metav1.DeleteOptions
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&opts); err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
			return
		}
	}
	f.mu.Lock()
	p := f.pods[r.PathValue("ns")+"/"+r.PathValue("name")]
	if p == nil {
		f.mu.Unlock()
		notFound(w, r.PathValue("name"))
		return
	}
	if pre := opts.Preconditions; pre != nil && pre.UID != nil && *pre.UID != p.pod.UID {
		f.mu.Unlock()
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
			"Operation cannot be fulfilled on Pod %q: Precondition failed: UID in precondition: %s, UID in object meta: %s", p.pod.Name, *pre.UID, p.pod.UID), nil)
		return
	}
	grace := int64(30)
	if g := p.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if opts.GracePeriodSeconds != nil {
		grace = *opts.GracePeriodSeconds
	}
	pod := p.terminate(grace)
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, pod)
}

func (f *fakeCluster) log(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	p := f.pods[r.PathValue("ns")+"/"+r.PathValue("name")]
	var started, valid bool
	var agent string
	name := r.URL.Query().Get("container")
	if p != nil {
		started, agent = p.started, p.container().Name
		if name == "" {
			name = p.pod.Spec.Containers[0].Name
		}
		valid = slices.ContainsFunc(p.pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	}
	f.mu.Unlock()
	if p == nil {
		notFound(w, r.PathValue("name"))
		return
	}
	if !valid {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("container %s is not valid for pod %s", name, r.PathValue("name")), nil)
		return
	}
	if name != agent {
		// A container the fake kubelet does not run has no output.
		w.Header().Set("Content-Type", "text/plain")
		return
	}
	if !started {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", name, r.PathValue("name")), nil)
		return
	}
	tail := -1
	if s := r.URL.Query().Get("tailLines"); s != "" {
		tail, _ = strconv.Atoi(s)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	p.log.stream(w, r, tail, r.URL.Query().Get("follow") == "true", f.closing)
}
