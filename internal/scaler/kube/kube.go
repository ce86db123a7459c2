//go:build kubernetes

package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kilnci/kiln/internal/scaler"
)

// Backend is the kubernetes backend: each agent is a pod (Pod) in the
// scaler's namespace, created through the cluster's API, watched until
// its agent container runs (or the kubelet gives up on it: the reason is
// the spawn's error), followed for its output, and deleted on Destroy.
type Backend struct {
	// Instance is this server's instance id (the pods' label).
	Instance string
	// Scalers are the kubernetes scalers configured at start: Sweep and
	// Reap look for left-over pods in their namespaces, and in those of
	// the scalers a reload adds (CheckConfig and Spawn remember them).
	Scalers []scaler.Config
	// GracePeriod is the pods' termination grace period on Destroy: the
	// agent gets SIGTERM, SIGKILL after it (default 5 s).
	GracePeriod time.Duration

	mu       sync.Mutex
	clusters map[string]*cluster // by kubeconfig path
}

// cluster is one kubeconfig's client and default namespace.
type cluster struct {
	core      corev1client.CoreV1Interface
	namespace string
}

// client returns the cluster of a kubeconfig path: that file, or ("")
// $KUBECONFIG, ~/.kube/config, and else the pod's own service account when
// the server runs in a cluster (client-go's loading rules).
func (b *Backend) client(kubeconfig string) (*cluster, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.clusters[kubeconfig]; c != nil {
		return c, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster: %v", err)
		}
		return nil, err
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	rc.UserAgent = "kiln-scaler"
	// JSON, not the protobuf client-go's pods client prefers by default:
	// what kiln sends and reads is the documented JSON of the API (and
	// what its tests' fake API server speaks).
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	// One watch and a log stream per agent, a create and a delete: the
	// default 5 requests a second would queue a burst of spawns.
	rc.QPS, rc.Burst = 50, 100
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if b.clusters == nil {
		b.clusters = map[string]*cluster{}
	}
	c := &cluster{core: core, namespace: ns}
	b.clusters[kubeconfig] = c
	return c, nil
}

// remember adds a scaler whose namespace Sweep and Reap have not looked
// in yet.
func (b *Backend) remember(c scaler.Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.ContainsFunc(b.Scalers, func(k scaler.Config) bool { return k.Kubeconfig == c.Kubeconfig && k.Namespace == c.Namespace }) {
		b.Scalers = append(b.Scalers, c)
	}
}

func (c *cluster) ns(s scaler.Config) string {
	if s.Namespace != "" {
		return s.Namespace
	}
	return c.namespace
}

func (b *Backend) grace() int64 {
	if b.GracePeriod <= 0 {
		return 5
	}
	return int64(max(b.GracePeriod.Round(time.Second)/time.Second, 1))
}

// CheckConfig refuses, at start, a kubernetes scaler whose pod template
// or kubeconfig cannot be read, whose agent container has no image, or
// whose pods could not reach the server (B165): a pod's loopback is its
// own, so a server_url on it — or none, which defaults to the server's
// listen address — is refused unless the template asks for the node's
// network (hostNetwork).
func (b *Backend) CheckConfig(c scaler.Config) error {
	tpl, err := LoadTemplate(c.PodTemplate)
	if err != nil {
		return fmt.Errorf("scalers (%s).pod_template: %v", c.Name, err)
	}
	if _, err := Pod(tpl, b.Instance, scaler.SpawnRequest{AgentID: "scaler-kubernetes-check", Scaler: c}); err != nil {
		return fmt.Errorf("scalers (%s): %v", c.Name, err)
	}
	if !tpl.Spec.HostNetwork {
		if c.ServerURL == "" {
			return fmt.Errorf("scalers (%s).server_url: a kubernetes scaler needs a server_url its pods reach (the server's own listen address is not theirs)", c.Name)
		}
		if u, err := url.Parse(c.ServerURL); err == nil && loopback(u.Hostname()) {
			return fmt.Errorf("scalers (%s).server_url: %q is a loopback address, which pods cannot reach (their loopback is their own); use an address or Service of the server they reach", c.Name, c.ServerURL)
		}
	}
	if _, err := b.client(c.Kubeconfig); err != nil {
		return fmt.Errorf("scalers (%s).kubeconfig: %v", c.Name, err)
	}
	b.remember(c)
	return nil
}

// Spawn creates the agent's pod and waits until its agent container runs
// (B161). A pod the kubelet gives up on — an image it cannot pull, a
// container it cannot create — or that ends before it runs fails the spawn
// with the kubelet's reason and message (B163), as does one still not
// running when ctx (the spawn timeout) ends; the pod is deleted then.
func (b *Backend) Spawn(ctx context.Context, req scaler.SpawnRequest) (scaler.Instance, error) {
	c := req.Scaler
	cl, err := b.client(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %v", err)
	}
	b.remember(c)
	tpl, err := LoadTemplate(c.PodTemplate)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: pod_template: %v", err)
	}
	pod, err := Pod(tpl, b.Instance, req)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %v", err)
	}
	ns := cl.ns(c)
	pods := cl.core.Pods(ns)
	where := ns + "/" + pod.Name
	req.Event(scaler.EventProvisioning, fmt.Sprintf("creating pod %s (image %s)", where, pod.Spec.Containers[agentIndex(&pod.Spec)].Image))
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: creating pod %s: %v", where, err)
	}
	p := newPod(b, pods, created, req.Event)
	go p.follow(created.ResourceVersion)
	fail := func(msg string) (scaler.Instance, error) {
		_ = p.Destroy(context.WithoutCancel(ctx), "spawn-failed")
		return nil, errors.New(scaler.WithTail(msg, p.Tail()))
	}
	select {
	case <-p.running:
	case <-p.stuck:
		return fail(fmt.Sprintf("kubernetes: pod %s cannot start: %s", where, p.status()))
	case <-p.exited:
		return fail(fmt.Sprintf("kubernetes: pod %s ended before its agent ran: %s", where, p.status()))
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fail(fmt.Sprintf("kubernetes: the spawn of pod %s was abandoned (%v): %s", where, ctx.Err(), p.status()))
		}
		return fail(fmt.Sprintf("kubernetes: pod %s was not running within the spawn timeout: %s", where, p.status()))
	}
	p.mu.Lock()
	ip, node := p.pod.Status.PodIP, p.pod.Spec.NodeName
	p.report = nil // later changes are the instance's, not the spawn's
	p.mu.Unlock()
	req.Event(scaler.EventNetwork, fmt.Sprintf("pod %s has IP %s on node %s, dialing %s", where, ip, node, req.ServerURL))
	req.Event(scaler.EventReady, fmt.Sprintf("pod %s running", where))
	return p, nil
}

// Reap deletes the pods of an agent id this server started (B164).
func (b *Backend) Reap(ctx context.Context, agentID string) error {
	return b.deleteWhere(ctx, labels.Set{LabelInstance: b.Instance, LabelAgent: agentID}, nil)
}

// Sweep deletes this server's pods whose agent id keep does not know: a
// previous process started them and crashed before it recorded them, or
// they outlived their spawn row (B164). Pods of other servers (another
// instance label) are never touched.
func (b *Backend) Sweep(ctx context.Context, keep func(agentID string) bool) error {
	return b.deleteWhere(ctx, labels.Set{LabelInstance: b.Instance}, func(l map[string]string) bool { return !keep(l[LabelAgent]) })
}

// deleteWhere deletes, in the namespace of every configured kubernetes
// scaler, the pods with the labels sel that also pass match (nil: all).
func (b *Backend) deleteWhere(ctx context.Context, sel labels.Set, match func(map[string]string) bool) error {
	var errs []error
	var seen []string
	grace := b.grace()
	b.mu.Lock()
	scalers := slices.Clone(b.Scalers)
	b.mu.Unlock()
	for _, c := range scalers {
		cl, err := b.client(c.Kubeconfig)
		if err != nil {
			errs = append(errs, fmt.Errorf("scaler %s: %v", c.Name, err))
			continue
		}
		key := c.Kubeconfig + "\x00" + cl.ns(c)
		if slices.Contains(seen, key) {
			continue
		}
		seen = append(seen, key)
		pods := cl.core.Pods(cl.ns(c))
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel.AsSelector().String()})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the pods of scaler %s: %v", c.Name, err))
			continue
		}
		for _, p := range list.Items {
			if match != nil && !match(p.Labels) {
				continue
			}
			err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}
