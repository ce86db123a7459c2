//go:build kubernetes

package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/kilnci/kiln/internal/scaler"
)

// stuckReasons are the agent container's waiting reasons the kubelet does
// not get past by itself (it retries a pull only to back off again): the
// spawn fails with them at once rather than waiting out its timeout.
// ErrImagePull is not among them: the kubelet's first pull may fail on a
// registry's hiccup and succeed on the retry.
var stuckReasons = []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// podInstance is an agent pod: one goroutine (follow) watches it from its
// creation to its deletion; its agent container's output is followed once
// it runs.
type podInstance struct {
	b       *Backend
	pods    corev1client.PodInterface
	name    string
	uid     types.UID
	capture *scaler.Capture
	ctx     context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	pod      *corev1.Pod
	report   func(typ, detail string) // the spawn's events; nil once Spawn returned
	reported string
	logs     bool
	err      error

	running, stuck, exited, gone, logsDone chan struct{}
	runOnce, stuckOnce, exitOnce, logOnce  sync.Once
	destroyOnce                            sync.Once
	dErr                                   error
}

func newPod(b *Backend, pods corev1client.PodInterface, created *corev1.Pod, report func(string, string)) *podInstance {
	ctx, cancel := context.WithCancel(context.Background())
	return &podInstance{b: b, pods: pods, name: created.Name, uid: created.UID, capture: &scaler.Capture{},
		ctx: ctx, cancel: cancel, pod: created, report: report,
		running: make(chan struct{}), stuck: make(chan struct{}), exited: make(chan struct{}),
		gone: make(chan struct{}), logsDone: make(chan struct{})}
}

// follow watches the pod from resource version rv until it is deleted (or
// Destroy gives up on it). A watch the server ends is resumed from the
// last version seen; one whose version expired starts again from a read of
// the pod.
func (p *podInstance) follow(rv string) {
	defer func() {
		p.end(errors.New("the pod was deleted"))
		p.cancel()
		p.mu.Lock()
		logs := p.logs
		p.mu.Unlock()
		if logs {
			<-p.logsDone
		}
		close(p.gone)
	}()
	retry := time.Second
	sel := fields.OneTermEqualSelector("metadata.name", p.name).String()
	for p.ctx.Err() == nil {
		w, err := p.pods.Watch(p.ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if !p.pause(&retry) {
				return
			}
			continue
		}
		retry = time.Second
	events:
		for e := range w.ResultChan() {
			pod, _ := e.Object.(*corev1.Pod)
			switch {
			case e.Type == watch.Error:
				rv = "" // expired (410 Gone): read the pod again below
				break events
			case pod == nil:
			case e.Type == watch.Bookmark:
				rv = pod.ResourceVersion
			case pod.UID != p.uid:
				// another pod of the same name: ours is gone
				w.Stop()
				return
			case e.Type == watch.Deleted:
				p.observe(pod)
				w.Stop()
				return
			default:
				rv = pod.ResourceVersion
				p.observe(pod)
			}
		}
		w.Stop()
		pod, err := p.pods.Get(p.ctx, p.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && pod.UID != p.uid):
			return
		case err != nil:
			if !p.pause(&retry) {
				return
			}
		default:
			rv = pod.ResourceVersion
			p.observe(pod)
		}
	}
}

// pause waits before the API is asked again (doubling to 30 s); false
// when the instance was given up meanwhile.
func (p *podInstance) pause(d *time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	*d = min(*d*2, 30*time.Second)
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// observe takes a new state of the pod: a change is a provisioning event
// while the spawn waits; the agent container running, stuck or ended
// moves the instance on.
func (p *podInstance) observe(pod *corev1.Pod) {
	status := describe(pod)
	p.mu.Lock()
	p.pod = pod
	report := p.report
	changed := status != p.reported
	p.reported = status
	p.mu.Unlock()
	if report != nil && changed {
		report(scaler.EventProvisioning, "pod "+p.name+": "+status)
	}
	st := agentStatus(pod)
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || (st != nil && st.State.Terminated != nil):
		var err error
		if st != nil && st.State.Terminated != nil {
			if t := st.State.Terminated; t.ExitCode != 0 || (t.Reason != "" && t.Reason != "Completed") {
				err = errors.New(terminated(t))
			}
		} else if pod.Status.Phase == corev1.PodFailed {
			err = fmt.Errorf("the pod failed: %s: %s", pod.Status.Reason, pod.Status.Message)
		}
		p.end(err)
	case st != nil && st.State.Running != nil:
		p.runOnce.Do(func() { close(p.running) })
		p.followLogs(true)
	case st != nil && st.State.Waiting != nil && slices.Contains(stuckReasons, st.State.Waiting.Reason):
		p.stuckOnce.Do(func() { close(p.stuck) })
	}
}

// followLogs copies the agent container's output into the capture (the
// failure tail): followed from its start while it runs, else the last
// lines once it has ended.
func (p *podInstance) followLogs(follow bool) {
	p.logOnce.Do(func() {
		p.mu.Lock()
		p.logs = true
		container := AgentContainer
		if len(p.pod.Spec.Containers) > 0 {
			container = p.pod.Spec.Containers[agentIndex(&p.pod.Spec)].Name
		}
		p.mu.Unlock()
		opts := &corev1.PodLogOptions{Container: container, Follow: follow}
		if !follow {
			lines := int64(scaler.TailLines)
			opts.TailLines = &lines
		}
		go func() {
			defer close(p.logsDone)
			rc, err := p.pods.GetLogs(p.name, opts).Stream(p.ctx)
			if err != nil {
				if follow && p.ctx.Err() == nil {
					fmt.Fprintf(p.capture, "kiln: reading the pod's output failed: %v\n", err)
				}
				return
			}
			defer rc.Close()
			_, _ = io.Copy(p.capture, rc)
		}()
	})
}

// end records how the agent ended and closes Exited, once its output has
// been read (a stuck stream holds it up 2 s at most).
func (p *podInstance) end(err error) {
	p.exitOnce.Do(func() {
		p.mu.Lock()
		started := p.logs
		ran := false
		if st := agentStatus(p.pod); st != nil && st.State.Terminated != nil && !st.State.Terminated.StartedAt.IsZero() {
			ran = true
		}
		p.err = err
		p.mu.Unlock()
		if !started && ran {
			p.followLogs(false)
		}
		p.mu.Lock()
		started = p.logs
		p.mu.Unlock()
		if started {
			t := time.NewTimer(2 * time.Second)
			select {
			case <-p.logsDone:
			case <-t.C:
			}
			t.Stop()
		}
		close(p.exited)
	})
}

// status describes the pod as last seen.
func (p *podInstance) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return describe(p.pod)
}

func (p *podInstance) Exited() <-chan struct{} { return p.exited }
func (p *podInstance) Tail() string            { return p.capture.Tail() }

func (p *podInstance) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Destroy deletes the pod — the agent gets SIGTERM, SIGKILL after the
// grace period — and waits until it is gone (B161); a pod already gone is
// fine.
func (p *podInstance) Destroy(ctx context.Context, _ string) error {
	p.destroyOnce.Do(func() {
		grace := p.b.grace()
		err := p.pods.Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &grace,
			Preconditions: &metav1.Preconditions{UID: &p.uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			p.dErr = fmt.Errorf("deleting pod %s: %v", p.name, err)
			p.cancel()
			<-p.gone
			return
		}
		select {
		case <-p.gone:
		case <-ctx.Done():
			p.cancel()
			<-p.gone
		}
	})
	return p.dErr
}
