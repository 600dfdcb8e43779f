package proccpu

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxThreads bounds the thread list SysmonUsed reads: a Go process has
// GOMAXPROCS threads and a few more, plus one per goroutine blocked in a
// system call or locked to its thread.
const maxThreads = 1 << 16

// maxSchedstat bounds the schedstat file read: three decimal numbers.
const maxSchedstat = 256

func sysmonUsed() (time.Duration, error) {
	tid, err := sysmonThread()
	if err != nil {
		return 0, err
	}
	return threadCPU(tid)
}

// sysmonThread is the lowest thread ID of this process above its process
// ID, or ErrNoSysmon when thread IDs wrapped around.
func sysmonThread() (int, error) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoSysmon, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxThreads + 1)
	if err != nil && err != io.EOF {
		return 0, fmt.Errorf("%w: %v", ErrNoSysmon, err)
	}
	if len(names) > maxThreads {
		return 0, fmt.Errorf("%w: /proc/self/task lists more than %d threads", ErrNoSysmon, maxThreads)
	}
	pid, best := os.Getpid(), 0
	for _, n := range names {
		tid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		switch {
		case tid < pid:
			return 0, fmt.Errorf("%w: thread %d below process %d (thread IDs wrapped around)", ErrNoSysmon, tid, pid)
		case tid > pid && (best == 0 || tid < best):
			best = tid
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("%w: process %d has no thread besides the main one", ErrNoSysmon, pid)
	}
	return best, nil
}

// threadCPU is the CPU time thread tid of this process has run, from the
// first field of /proc/self/task/<tid>/schedstat (nanoseconds on a CPU).
func threadCPU(tid int) (time.Duration, error) {
	path := "/proc/self/task/" + strconv.Itoa(tid) + "/schedstat"
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoSysmon, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSchedstat+1))
	if err != nil {
		return 0, fmt.Errorf("%w: read %s: %v", ErrNoSysmon, path, err)
	}
	if len(b) > maxSchedstat {
		return 0, fmt.Errorf("%w: %s over %d bytes", ErrNoSysmon, path, maxSchedstat)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, fmt.Errorf("%w: %s is empty", ErrNoSysmon, path)
	}
	ns, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("%w: %s: %q is not a CPU time in nanoseconds", ErrNoSysmon, path, fields[0])
	}
	return time.Duration(ns), nil
}
