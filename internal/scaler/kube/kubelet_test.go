//go:build kubernetes

package kube

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// fakePod is a pod of the fake cluster and what its kubelet does with it:
// schedule it (or report it unschedulable), pull its image (or back off),
// run the agent container — the one named "agent", else the first — as a
// process of the image's kiln binary, with the emptyDir mounts as
// directories of their own, report its exit, and on deletion SIGTERM it,
// SIGKILL after the grace period. Other containers are reported running
// without running anything. Every change is a watch event.
type fakePod struct {
	f       *fakeCluster
	pod     *corev1.Pod
	log     *logBuf
	done    chan struct{} // the process ended (or never started)
	proc    *os.Process
	started bool // the agent container's process started
	ended   bool
	removed bool
	dirs    []string
}

// container is the agent container the fake runs.
func (p *fakePod) container() corev1.Container {
	cs := p.pod.Spec.Containers
	if i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == AgentContainer }); i >= 0 {
		return cs[i]
	}
	return cs[0]
}

// setAgent sets the agent container's state; the others run.
func (p *fakePod) setAgent(st corev1.ContainerState, image string) {
	var out []corev1.ContainerStatus
	agent := p.container().Name
	for _, c := range p.pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "", ContainerID: ""}
		if c.Name == agent {
			cs.State, cs.Image = st, image
			cs.Ready = st.Running != nil
			if st.Running != nil || st.Terminated != nil {
				cs.ContainerID = "containerd://" + strings.ReplaceAll(string(p.pod.UID), "-", "")
			}
		} else {
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: p.pod.CreationTimestamp}}
			cs.Ready = true
		}
		out = append(out, cs)
	}
	p.pod.Status.ContainerStatuses = out
}

func (p *fakePod) run() {
	f := p.f
	defer func() {
		for _, d := range p.dirs {
			_ = os.RemoveAll(d)
		}
	}()
	f.mu.Lock()
	if p.removed {
		f.mu.Unlock()
		close(p.done)
		return
	}
	c := p.container()
	var milli int64
	for _, c := range p.pod.Spec.Containers {
		milli += c.Resources.Requests.Cpu().MilliValue()
	}
	now := metav1.Now()
	if milli > f.NodeMilliCPU {
		p.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message:            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
			LastTransitionTime: now}}
		f.record(watch.Modified, p.pod)
		f.mu.Unlock()
		close(p.done)
		return
	}
	p.pod.Spec.NodeName = "fake-node-1"
	p.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	p.pod.Status.HostIP, p.pod.Status.StartTime = "10.0.0.1", &now
	p.setAgent(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}, c.Image)
	f.record(watch.Modified, p.pod)
	bin, pullable := f.Images[c.Image]
	if !pullable {
		ref := "docker.io/library/" + c.Image
		if strings.Contains(c.Image, "/") {
			ref = c.Image
		}
		p.setAgent(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: fmt.Sprintf(
			"failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)}}, c.Image)
		f.record(watch.Modified, p.pod)
		p.setAgent(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: fmt.Sprintf("Back-off pulling image %q", c.Image)}}, c.Image)
		f.record(watch.Modified, p.pod)
		f.mu.Unlock()
		close(p.done)
		return
	}
	if bin == "" || len(c.Command) == 0 || c.Command[0] != "kiln" {
		cmd := "<image entrypoint>"
		if len(c.Command) > 0 {
			cmd = c.Command[0]
		}
		p.exit(128, "StartError", fmt.Sprintf("failed to create containerd task: failed to create shim task: OCI runtime create failed: "+
			"runc create failed: unable to start container process: exec: %q: executable file not found in $PATH: unknown", cmd), metav1.Time{})
		f.mu.Unlock()
		close(p.done)
		return
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range p.pod.Spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				dir, err := os.MkdirTemp("", "fake-kubelet-")
				if err != nil {
					panic(err)
				}
				p.dirs = append(p.dirs, dir)
				mounts[m.MountPath] = dir
			}
		}
	}
	home, _ := os.MkdirTemp("", "fake-kubelet-home-")
	p.dirs = append(p.dirs, home)
	mapped := func(s string) string {
		for from, to := range mounts {
			if s == from || strings.HasPrefix(s, from+"/") {
				return to + strings.TrimPrefix(s, from)
			}
		}
		return s
	}
	var args []string
	for _, a := range c.Args {
		args = append(args, mapped(a))
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "HOSTNAME=" + p.pod.Name}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+mapped(e.Value))
	}
	f.mu.Unlock()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	f.mu.Lock()
	if err != nil {
		p.exit(128, "StartError", err.Error(), metav1.Time{})
		f.mu.Unlock()
		close(p.done)
		return
	}
	if p.removed { // deleted while it started
		f.mu.Unlock()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		close(p.done)
		return
	}
	started := metav1.Now()
	p.proc, p.started = cmd.Process, true
	p.pod.Status.Phase, p.pod.Status.PodIP = corev1.PodRunning, "10.244.0.7"
	p.pod.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.7"}}
	p.setAgent(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}, c.Image)
	f.record(watch.Modified, p.pod)
	deleting := p.pod.DeletionTimestamp != nil
	f.mu.Unlock()
	if deleting {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	p.log.close()
	f.mu.Lock()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	p.exit(int32(code), reason, "", started)
	if p.pod.DeletionTimestamp != nil {
		p.remove()
	}
	f.mu.Unlock()
	close(p.done)
}

// exit reports the agent container ended; the caller holds f.mu.
func (p *fakePod) exit(code int32, reason, msg string, started metav1.Time) {
	p.ended = true
	p.setAgent(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg,
		StartedAt: started, FinishedAt: metav1.Now()}}, p.container().Image)
	p.pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		p.pod.Status.Phase = corev1.PodFailed
	}
	p.f.record(watch.Modified, p.pod)
}

// terminate is a DELETE: the pod gets its deletion timestamp; one whose
// container runs is removed once its process has ended (SIGTERM, SIGKILL
// after grace seconds), any other at once. The caller holds f.mu; it
// returns the pod as the API answers.
func (p *fakePod) terminate(grace int64) *corev1.Pod {
	if p.pod.DeletionTimestamp == nil {
		at := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
		p.pod.DeletionTimestamp, p.pod.DeletionGracePeriodSeconds = &at, &grace
	}
	out := p.pod.DeepCopy()
	if p.proc == nil || p.ended {
		p.remove()
		return out
	}
	p.f.record(watch.Modified, p.pod)
	out.ResourceVersion = p.pod.ResourceVersion
	pid := p.proc.Pid
	sig := syscall.SIGTERM
	if grace == 0 {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
	p.f.wg.Go(func() {
		t := time.NewTimer(time.Duration(grace) * time.Second)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-p.f.closing:
		}
	})
	return out
}

// remove deletes the pod from the store: a DELETED event. The caller
// holds f.mu.
func (p *fakePod) remove() {
	if p.removed {
		return
	}
	p.removed = true
	delete(p.f.pods, p.pod.Namespace+"/"+p.pod.Name)
	p.f.record(watch.Deleted, p.pod)
}

// kill ends the process at once (the fake closing); the caller holds f.mu.
func (p *fakePod) kill() {
	if p.proc != nil && !p.ended {
		_ = syscall.Kill(-p.proc.Pid, syscall.SIGKILL)
	}
}

// logBuf is a container's output, streamed to log requests.
type logBuf struct {
	mu      sync.Mutex
	b       []byte
	closed  bool
	changed chan struct{}
}

func newLogBuf() *logBuf { return &logBuf{changed: make(chan struct{})} }

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logBuf) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// stream writes the output (its last tail lines when tail >= 0) and, when
// follow, what comes after until the container ends.
func (l *logBuf) stream(w http.ResponseWriter, r *http.Request, tail int, follow bool, closing <-chan struct{}) {
	l.mu.Lock()
	data := slices.Clone(l.b)
	off := len(l.b)
	l.mu.Unlock()
	if tail >= 0 {
		lines := strings.SplitAfter(string(data), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		data = []byte(strings.Join(lines[max(0, len(lines)-tail):], ""))
	}
	fl := w.(http.Flusher)
	_, _ = w.Write(data)
	fl.Flush()
	for follow {
		l.mu.Lock()
		data, off = slices.Clone(l.b[off:]), len(l.b)
		closed, ch := l.closed, l.changed
		l.mu.Unlock()
		if _, err := w.Write(data); err != nil {
			return
		}
		fl.Flush()
		if closed {
			return
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-closing:
			return
		}
	}
}
