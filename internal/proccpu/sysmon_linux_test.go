package proccpu

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSysmonUsed checks that SysmonUsed reads the thread that runs no
// goroutine and wakes while goroutines run: while a goroutine locked to its
// thread spins for 50 ms of CPU (making system calls, which keeps sysmon
// awake, and running long enough to be preempted by it), sysmon's CPU
// grows, by far less than the spinner's; the spinner's thread, the main
// thread and any idle thread would read otherwise.
func TestSysmonUsed(t *testing.T) {
	tid, err := sysmonThread()
	if err != nil {
		t.Fatalf("sysmonThread: %v", err)
	}
	if tid == unix.Getpid() {
		t.Fatalf("sysmon thread %d is the main thread", tid)
	}
	before, err := SysmonUsed()
	if err != nil {
		t.Fatalf("SysmonUsed: %v", err)
	}
	spinner := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		me := unix.Gettid()
		for start := Used(); Used()-start < 50*time.Millisecond; {
		}
		spinner <- me
	}()
	me := <-spinner
	after, err := SysmonUsed()
	if err != nil {
		t.Fatalf("SysmonUsed: %v", err)
	}
	if me == tid {
		t.Fatalf("the spinning goroutine ran on thread %d, taken for sysmon", me)
	}
	d := after - before
	if d <= 0 || d > 25*time.Millisecond {
		t.Fatalf("sysmon used %v while a goroutine spun for 50ms; want more than 0 and well under 50ms", d)
	}
	if total := Used(); after > total {
		t.Fatalf("sysmon used %v, more than the process's %v", after, total)
	}
	t.Logf("sysmon thread %d: %v while a goroutine spun 50ms (thread %d)", tid, d, me)
}
