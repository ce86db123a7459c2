package scaler

import (
	"os/exec"
	"syscall"
	"testing"
)

// A group is signalled only while its number is still the leader's: a live
// leader with the recorded start time is ours, a process holding the number
// with another start time is a stranger's (the number was reused), and a
// number nobody holds leaves only the leader's own orphans, if any.
func TestGroupStillOursTellsAReusedNumber(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	pid := cmd.Process.Pid
	started := startTime(pid)
	if started == 0 {
		t.Fatalf("no start time for pid %d", pid)
	}
	if !groupStillOurs(pid, started) {
		t.Fatal("the live leader's group was not ours")
	}
	if groupStillOurs(pid, started+1) {
		t.Fatal("a process holding the number with another start time was taken for ours")
	}
	if groupStillOurs(pid, 0) {
		t.Fatal("an unknown start time allowed a signal")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if startTime(pid) == 0 && !groupStillOurs(pid, started) {
		t.Fatal("a number nobody holds was not ours")
	}
}
