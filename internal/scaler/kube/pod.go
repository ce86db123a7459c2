//go:build kubernetes

package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kilnci/kiln/internal/scaler"
)

// Labels on every pod the backend creates, so a server finds its own pods
// again (orphan removal) and never touches another server's.
const (
	LabelScaler   = "kilnci.io/scaler"
	LabelInstance = "kilnci.io/instance"
	LabelAgent    = "kilnci.io/agent-id"
)

// AgentContainer is the container kiln runs the agent in: the template's
// container of that name, else its first, else one kiln adds.
const AgentContainer = "agent"

// The agent's state directory is an emptyDir of the pod's own: the
// image's file system may be read-only, and the state goes with the pod.
const (
	stateVolume = "kiln-agent-state"
	stateDir    = "/var/lib/kiln-agent"
)

// Template is the operator's part of an agent pod: its labels,
// annotations and spec (node selector, tolerations, service account,
// sidecars, security context, …).
type Template struct {
	Labels      map[string]string
	Annotations map[string]string
	Spec        corev1.PodSpec
}

// LoadTemplate reads a scaler's pod_template: inline YAML when the value
// holds a line break or starts with "{", else the path of a YAML file;
// "" is an empty pod. The YAML is a Pod (apiVersion v1, kind Pod, with
// metadata and spec) or a bare PodSpec; an unknown field is an error
// naming it, so a typo is not silently dropped.
func LoadTemplate(value string) (Template, error) {
	var data []byte
	switch {
	case value == "":
		return Template{}, nil
	case strings.Contains(value, "\n") || strings.HasPrefix(strings.TrimSpace(value), "{"):
		data = []byte(value)
	default:
		b, err := os.ReadFile(value)
		if err != nil {
			return Template{}, err
		}
		data = b
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Template{}, fmt.Errorf("not YAML: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return Template{}, errors.New("not a mapping of a Pod's or a PodSpec's fields")
	}
	if _, isPod := top["spec"]; isPod {
		var pod corev1.Pod
		if err := strict(js, &pod); err != nil {
			return Template{}, fmt.Errorf("not a Pod: %v", err)
		}
		if (pod.Kind != "" && pod.Kind != "Pod") || (pod.APIVersion != "" && pod.APIVersion != "v1") {
			return Template{}, fmt.Errorf("a %s %s is not a v1 Pod", pod.APIVersion, pod.Kind)
		}
		return Template{Labels: pod.Labels, Annotations: pod.Annotations, Spec: pod.Spec}, nil
	}
	var spec corev1.PodSpec
	if err := strict(js, &spec); err != nil {
		return Template{}, fmt.Errorf("not a Pod or a PodSpec: %v", err)
	}
	return Template{Spec: spec}, nil
}

// strict decodes JSON as the API server does with strict field
// validation: field names match exactly, and an unknown or duplicated
// field is an error naming its path (spec.containers[0].imag).
func strict(js []byte, into any) error {
	problems, err := kjson.UnmarshalStrict(js, into)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// Pod is the agent pod for a spawn: the template with kiln's part set on
// the agent container — image (the scaler's when the template has none),
// command `kiln agent` with the request's server, id and labels, the
// token in its environment (never in the arguments), the CPU and memory
// of the request as requests and limits — and on the pod: its name
// kiln-<agent id>, the labels of orphan removal, restartPolicy Never (an
// agent takes one job; a restarted one would have a spent token), a state
// volume, and no service account token unless the template asks for one
// (the job's steps run in the pod).
func Pod(tpl Template, instance string, req scaler.SpawnRequest) (*corev1.Pod, error) {
	spec := *tpl.Spec.DeepCopy()
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: AgentContainer}}
	}
	c := &spec.Containers[agentIndex(&spec)]
	if c.Image == "" {
		c.Image = req.Scaler.Image
	}
	if c.Image == "" {
		return nil, errors.New("the pod template's agent container has no image and the scaler sets none (image)")
	}
	c.Command = []string{"kiln"}
	c.Args = []string{"agent", "--server", req.ServerURL, "--id", req.AgentID, "--labels", strings.Join(req.Labels, ","),
		"--max-jobs", "1", "--state-dir", stateDir, "--log-format", "json",
		// The pod is the isolation boundary; namespaces inside it would
		// need privileges it does not have.
		"--isolation", "off"}
	set := map[string]string{"KILN_AGENT_TOKEN": req.Token}
	for k, v := range req.Env {
		set[k] = v
	}
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { _, ours := set[e.Name]; return ours })
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: set[k]})
	}
	if req.CPUs > 0 || req.MemoryBytes > 0 {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
	}
	if req.CPUs > 0 {
		q := *resource.NewMilliQuantity(int64(req.CPUs*1000), resource.DecimalSI)
		c.Resources.Requests[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceCPU] = q, q
	}
	if req.MemoryBytes > 0 {
		q := *resource.NewQuantity(req.MemoryBytes, resource.BinarySI)
		c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory] = q, q
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == stateVolume }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: stateVolume,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == stateVolume }) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: stateVolume, MountPath: stateDir})
	}
	spec.RestartPolicy = corev1.RestartPolicyNever
	if spec.AutomountServiceAccountToken == nil {
		no := false
		spec.AutomountServiceAccountToken = &no
	}
	labels := map[string]string{}
	for k, v := range tpl.Labels {
		labels[k] = v
	}
	labels[LabelScaler], labels[LabelInstance], labels[LabelAgent] = req.Scaler.Name, instance, req.AgentID
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: PodName(req.AgentID), Labels: labels, Annotations: tpl.Annotations},
		Spec:       spec,
	}, nil
}

// PodName is the name of an agent's pod.
func PodName(agentID string) string { return "kiln-" + agentID }

// agentIndex is the index of the agent container in a spec with
// containers: the one named AgentContainer, else the first.
func agentIndex(spec *corev1.PodSpec) int {
	return max(0, slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == AgentContainer }))
}

// agentStatus is the agent container's status in a pod (nil before the
// kubelet reports one).
func agentStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	name := pod.Spec.Containers[agentIndex(&pod.Spec)].Name
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// describe says where a pod is, for the failure detail of a spawn that
// never ran: unschedulable, pulling, waiting with the kubelet's reason.
func describe(pod *corev1.Pod) string {
	var b bytes.Buffer
	b.WriteString(string(pod.Status.Phase))
	if pod.Status.Reason != "" {
		fmt.Fprintf(&b, " (%s: %s)", pod.Status.Reason, pod.Status.Message)
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			fmt.Fprintf(&b, ", not scheduled: %s: %s", cond.Reason, cond.Message)
		}
	}
	if pod.Spec.NodeName != "" {
		fmt.Fprintf(&b, " on node %s", pod.Spec.NodeName)
	}
	if st := agentStatus(pod); st != nil {
		switch {
		case st.State.Waiting != nil:
			fmt.Fprintf(&b, ", container %s waiting: %s", st.Name, st.State.Waiting.Reason)
			if m := st.State.Waiting.Message; m != "" {
				fmt.Fprintf(&b, ": %s", m)
			}
		case st.State.Terminated != nil:
			fmt.Fprintf(&b, ", container %s %s", st.Name, terminated(st.State.Terminated))
		case st.State.Running != nil:
			fmt.Fprintf(&b, ", container %s running", st.Name)
		}
	}
	return b.String()
}

// terminated says how a container ended: its exit code, the kubelet's
// reason (OOMKilled as "killed: out of memory") and message.
func terminated(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("exited with code %d", t.ExitCode)
	switch {
	case t.Reason == "OOMKilled":
		s += " (killed: out of memory)"
	case t.Reason != "" && t.Reason != "Completed" && t.Reason != "Error":
		s += " (" + t.Reason + ")"
	}
	if t.Message != "" {
		s += ": " + strings.TrimSpace(t.Message)
	}
	return s
}
