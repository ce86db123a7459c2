package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Agents that lie about their OS and architecture, over real WebSockets:
// a value outside Go's GOOS/GOARCH never becomes a label (so "gpu" as an
// OS neither gets the agent a gpu label nor slips one past the scope), and
// a scope that names an OS or architecture pins it. No label outside the
// scope reaches the registry, and no job asking for one is dispatched.
// Proves B114 (docs/behaviours.md).
func TestReportedPlatformStaysInTheTokensScope(t *testing.T) {
	h := start(t, storetest.Backends[0], options{cfg: fastConfig()})
	_, docker := h.token(store.AgentTokenSpec{Labels: kiln.NewLabels("docker")})
	_, linuxDocker := h.token(store.AgentTokenSpec{Labels: kiln.NewLabels("docker", "linux", "amd64")})
	_, open := h.token(store.AgentTokenSpec{})
	register := func(token, id, os, arch string, labels ...string) (*client, *proto.RegisterAck, *proto.Error) {
		t.Helper()
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](c)
		c.send(&proto.Register{AgentID: id, AgentSecret: testSecret(id), Labels: labels, MaxJobs: 1, OS: os, Arch: arch})
		select {
		case m := <-c.in:
			ack, ok := m.(*proto.RegisterAck)
			if !ok {
				t.Fatalf("%s: got %T", id, m)
			}
			return c, ack, nil
		case e := <-c.errs:
			if code, _ := c.closed(); code != proto.CloseAuthFailed {
				t.Fatalf("%s: refused with close %d", id, code)
			}
			if h.f.reg.get(id) != nil {
				t.Fatalf("%s: refused but registered", id)
			}
			return c, nil, e
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer to register", id)
		}
		return nil, nil, nil
	}
	refused := func(token, id, os, arch, want string, labels ...string) {
		t.Helper()
		if _, ack, e := register(token, id, os, arch, labels...); e == nil || e.Code != proto.ErrUnauthorized || !strings.Contains(e.Message, want) {
			t.Fatalf("%s: ack %+v, error %+v; want UNAUTHORIZED naming %q", id, ack, e, want)
		}
	}
	labelled := func(token, id, os, arch, want string, labels ...string) *client {
		t.Helper()
		c, ack, e := register(token, id, os, arch, labels...)
		if e != nil || strings.Join(ack.Labels, ",") != want {
			t.Fatalf("%s: ack %+v, error %+v; want labels %s", id, ack, e, want)
		}
		return c
	}

	// "gpu" as an OS is no OS: it is not a label, and asking for it too
	// is outside the scope.
	refused(docker, "liar-1", "gpu", "amd64", "gpu", "docker", "gpu")
	refused(docker, "liar-2", "linux", "GPU", "gpu", "gpu")
	_, jobs := h.run(job("g", "gpu"))
	labelled(docker, "liar-3", "gpu", "amd64", "amd64,docker", "docker")
	labelled(open, "liar-4", " Deploy ", "prod", "x", "x") // unscoped: still no made-up platform labels
	// A scope naming an OS and an architecture pins them.
	refused(linuxDocker, "liar-5", "windows", "amd64", "windows", "docker")
	refused(linuxDocker, "liar-6", "linux", "arm64", "arm64", "docker")
	// Real platforms within the scope, or a scope naming none, register.
	labelled(linuxDocker, "honest-1", "linux", "amd64", "amd64,docker,linux", "docker")
	labelled(docker, "honest-2", "Windows", "arm64", "arm64,docker,windows", "docker")

	for _, a := range h.f.reg.list() {
		if a.labels.Labels.Has("gpu") || a.labels.Labels.Has("deploy") || a.labels.Labels.Has("prod") {
			t.Fatalf("agent %s got a made-up label: %v", a.id, a.labels.Labels)
		}
	}
	if j, err := h.db.Jobs().Get(bg, jobs["g"]); err != nil || j.Status != kiln.JobQueued {
		t.Fatalf("the gpu job: %+v %v", j, err)
	}
}

// An agent whose hostname or version holds terminal escapes or other
// control characters is refused before it is registered or listed.
// Proves B115 (docs/behaviours.md).
func TestAgentMetadataWithControlCharactersIsRefused(t *testing.T) {
	h := start(t, storetest.Backends[0], options{cfg: fastConfig()})
	_, token := h.token(store.AgentTokenSpec{})
	for i, reg := range []proto.Register{
		{Hostname: "box\x1b]0;pwned\x07"},
		{Version: "1.0\r\nlevel=ERROR msg=forged"},
		{Hostname: "evil\u202etxt.exe"},
	} {
		id := "ctl-" + string(rune('a'+i))
		reg.AgentID, reg.AgentSecret, reg.MaxJobs = id, testSecret(id), 1
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](c)
		c.send(&reg)
		if e := c.errorFrame(); e.Code != proto.ErrInvalidMessage || !strings.Contains(e.Message, "control or formatting character") {
			t.Fatalf("%q/%q: error %+v", reg.Hostname, reg.Version, e)
		}
		if code, _ := c.closed(); code != proto.CloseInvalidMessage {
			t.Fatalf("close %d", code)
		}
	}
	recs, err := h.db.Auth().ListAgents(bg)
	if err != nil || len(recs) != 0 {
		t.Fatalf("agents recorded: %+v %v", recs, err)
	}
}
