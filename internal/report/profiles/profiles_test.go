package profiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// builder makes small synthetic profiles: stacks are function names,
// innermost first.
type builder struct {
	p     *profile.Profile
	funcs map[string]*profile.Function
}

func newBuilder(types ...[2]string) *builder {
	b := &builder{p: &profile.Profile{}, funcs: map[string]*profile.Function{}}
	for _, t := range types {
		b.p.SampleType = append(b.p.SampleType, &profile.ValueType{Type: t[0], Unit: t[1]})
	}
	return b
}

// sample adds a sample; a stack element "a|b" is one location with b
// inlined into a (a innermost).
func (b *builder) sample(values []int64, labels map[string][]string, stack ...string) {
	s := &profile.Sample{Value: values, Label: labels}
	for _, frame := range stack {
		loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: uint64(0x1000 + len(b.p.Location))}
		for _, name := range strings.Split(frame, "|") {
			f := b.funcs[name]
			if f == nil {
				f = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name}
				b.funcs[name] = f
				b.p.Function = append(b.p.Function, f)
			}
			loc.Line = append(loc.Line, profile.Line{Function: f})
		}
		b.p.Location = append(b.p.Location, loc)
		s.Location = append(s.Location, loc)
	}
	b.p.Sample = append(b.p.Sample, s)
}

func (b *builder) write(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := b.p.Write(f); err != nil {
		t.Fatal(err)
	}
}

func phase(p string) map[string][]string { return map[string][]string{"phase": {p}} }

func find(t *testing.T, tops []PhaseTop, phase string) PhaseTop {
	t.Helper()
	for _, pt := range tops {
		if pt.Phase == phase {
			return pt
		}
	}
	t.Fatalf("no phase %q in %+v", phase, tops)
	return PhaseTop{}
}

func funcOf(pt PhaseTop, name string) (Func, bool) {
	for _, f := range pt.Funcs {
		if f.Name == name {
			return f, true
		}
	}
	return Func{}, false
}

// TestCPUByPhaseLabel: CPU samples of the parent and a host are merged and
// grouped by their phase label; flat counts the innermost frame, cum every
// function on the stack once.
func TestCPUByPhaseLabel(t *testing.T) {
	dir := t.TempDir()
	cpu := [][2]string{{"samples", "count"}, {"cpu", "nanoseconds"}}
	parent := newBuilder(cpu...)
	parent.sample([]int64{1, 10}, phase("serialize"), "proto.Marshal", "ipc.serialize", "main")
	parent.sample([]int64{1, 30}, nil, "runtime.gc")
	parent.write(t, filepath.Join(dir, CPUFile))
	host := newBuilder(cpu...)
	host.sample([]int64{2, 20}, phase("execute"), "sha256.block", "hashTask", "runTask")
	host.sample([]int64{3, 25}, phase("execute"), "hashTask|helper", "runTask", "hashTask") // recursion: cum once
	host.sample([]int64{1, 5}, phase("serialize"), "ipc.serialize", "main")
	host.write(t, filepath.Join(dir, HostsDir, "host-1", CPUFile))
	// A heap profile beside it is not read for CPU.
	newBuilder([2]string{"alloc_space", "bytes"}).write(t, filepath.Join(dir, HeapFile))

	tops, err := TopByPhase(dir, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(tops) != 3 || tops[0].Phase != "execute" || tops[1].Phase != BucketRuntime || tops[2].Phase != "serialize" {
		t.Fatalf("phases %+v, want execute, %s, serialize by total", tops, BucketRuntime)
	}
	ex := find(t, tops, "execute")
	if ex.Total != 45 || ex.Unit != "nanoseconds" {
		t.Errorf("execute total %d %s, want 45 nanoseconds", ex.Total, ex.Unit)
	}
	for name, want := range map[string]Func{
		"hashTask": {"hashTask", 25, 45}, "sha256.block": {"sha256.block", 20, 20}, "runTask": {"runTask", 0, 45}, "helper": {"helper", 0, 25},
	} {
		if got, _ := funcOf(ex, name); got != want {
			t.Errorf("execute %s: got %+v, want %+v", name, got, want)
		}
	}
	if ex.Funcs[0].Name != "hashTask" || ex.Funcs[1].Name != "sha256.block" {
		t.Errorf("execute funcs not by flat: %+v", ex.Funcs)
	}
	se := find(t, tops, "serialize")
	if f, _ := funcOf(se, "ipc.serialize"); se.Total != 15 || f.Flat != 5 || f.Cum != 15 {
		t.Errorf("serialize (parent and host merged): total %d, ipc.serialize %+v; want 15, flat 5 cum 15", se.Total, f)
	}
	top1, err := TopByPhase(dir, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ex := find(t, top1, "execute"); len(ex.Funcs) != 1 || ex.Funcs[0].Name != "hashTask" || ex.Total != 45 {
		t.Errorf("n=1: %+v", ex)
	}
}

// TestAllocByEntryFunction: allocation samples go to the phase of the
// innermost entry function on their stack; labels are not used.
func TestAllocByEntryFunction(t *testing.T) {
	dir := t.TempDir()
	heap := newBuilder([2]string{"alloc_objects", "count"}, [2]string{"alloc_space", "bytes"},
		[2]string{"inuse_objects", "count"}, [2]string{"inuse_space", "bytes"})
	ser, send, exec := mod+"chunking.(*Sender).Complete", mod+"chunking.(*Sender).sendChunk", mod+"ipc/taskproto.runTask"
	heap.sample([]int64{1, 100, 0, 0}, phase("send"), "chunking.Encode", ser, "worker") // serialize (label ignored)
	heap.sample([]int64{1, 40, 0, 0}, nil, "grpc.Invoke", send, ser, "worker")          // send: innermost wins
	heap.sample([]int64{1, 7, 0, 0}, nil, mod+"runtime/scenario.newText", "main")       // the generator
	heap.sample([]int64{1, 0, 1, 9}, nil, "never.allocated", ser)                       // zero alloc_space: skipped
	heap.write(t, filepath.Join(dir, HostsDir, "host-2", HeapFile))
	host := newBuilder([2]string{"alloc_objects", "count"}, [2]string{"alloc_space", "bytes"})
	host.sample([]int64{1, 64}, nil, "make|hashTask", exec) // inlined frames are searched too
	host.write(t, filepath.Join(dir, HostsDir, "host-1", HeapFile))

	tops, err := TopByPhase(dir, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"serialize": 100, "send": 40, "execute": 64, BucketGenerator: 7}
	if len(tops) != len(want) {
		t.Errorf("phases %+v, want %v", tops, want)
	}
	for ph, total := range want {
		if pt := find(t, tops, ph); pt.Total != total || pt.Unit != "bytes" {
			t.Errorf("%s: total %d %s, want %d bytes", ph, pt.Total, pt.Unit, total)
		}
	}
	if _, ok := funcOf(find(t, tops, "serialize"), "never.allocated"); ok {
		t.Errorf("a sample with no alloc_space counted")
	}
}

func TestEntriesAreKnownPhases(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Entries {
		if !e.Phase.Valid() || !(strings.HasPrefix(e.Func, mod) || strings.HasPrefix(e.Func, "google.golang.org/grpc")) || seen[e.Func] || e.Component == "" {
			t.Errorf("bad or duplicate entry %+v", e)
		}
		seen[e.Func] = true
	}
}

func TestErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := TopByPhase(empty, false, 5); err == nil || !strings.Contains(err.Error(), "no cpu.pprof in") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := TopByPhase(filepath.Join(empty, "missing"), false, 5); err == nil {
		t.Errorf("missing dir: no error")
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, HeapFile), []byte("not a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := TopByPhase(bad, true, 5); err == nil || !strings.Contains(err.Error(), HeapFile) {
		t.Errorf("garbage: %v, want an error naming the file", err)
	}
	// A CPU profile where a heap profile is expected.
	wrong := t.TempDir()
	newBuilder([2]string{"cpu", "nanoseconds"}).write(t, filepath.Join(wrong, HeapFile))
	if _, err := TopByPhase(wrong, true, 5); err == nil || !strings.Contains(err.Error(), "no alloc_space samples") {
		t.Errorf("wrong kind: %v", err)
	}
	// Over the size bound (lowered here), compressed or not.
	big := t.TempDir()
	b := newBuilder([2]string{"cpu", "nanoseconds"})
	for i := 0; i < 200; i++ {
		b.sample([]int64{1}, phase("execute"), strings.Repeat("f", 50+i))
	}
	b.write(t, filepath.Join(big, CPUFile))
	oldFile, oldHosts := fileLimit, hostLimit
	fileLimit, hostLimit = 1000, 2
	defer func() { fileLimit, hostLimit = oldFile, oldHosts }()
	if _, err := TopByPhase(big, false, 5); err == nil || !strings.Contains(err.Error(), "MaxFileBytes") {
		t.Errorf("over the bound: %v, want an error naming MaxFileBytes", err)
	}
	// More host directories than the bound.
	many := t.TempDir()
	for _, h := range []string{"host-1", "host-2", "host-3"} {
		newBuilder([2]string{"cpu", "nanoseconds"}).write(t, filepath.Join(many, HostsDir, h, CPUFile))
	}
	if _, err := TopByPhase(many, false, 5); err == nil || !strings.Contains(err.Error(), "MaxHosts") {
		t.Errorf("over the host bound: %v, want an error naming MaxHosts", err)
	}
}

// TestBook: a sample is booked by its labels (with its row when it names
// its component), else by the innermost entry on its stack (a host's ipc
// entries are taskhost's, the other way round; gRPC's writer is the
// client's or the server's by the function that started it), else to a
// bucket by its frames.
func TestBook(t *testing.T) {
	b := newBuilder([2]string{"cpu", "nanoseconds"})
	add := func(labels map[string][]string, stack ...string) *profile.Sample {
		b.sample([]int64{1}, labels, stack...)
		return b.p.Sample[len(b.p.Sample)-1]
	}
	labels := map[string][]string{"phase": {"deserialize"}, "component": {"chunking"}, "direction": {"request"}}
	loopy := grpcTransport + "(*loopyWriter).run"
	for _, tc := range []struct {
		name string
		s    *profile.Sample
		host bool
		want Booking
	}{
		{"label with row", add(labels, "proto.Unmarshal"), false, Booking{"deserialize", "chunking.deserialize/request", ByLabel}},
		{"label without component", add(phase("execute"), "x"), false, Booking{"execute", "", ByLabel}},
		{"label without direction", add(map[string][]string{"phase": {"execute"}, "component": {"taskhost"}}, "x"), true,
			Booking{"execute", "taskhost.execute", ByLabel}},
		{"entry, parent", add(nil, "memmove", mod+"ipc.(*Conn).serialize", mod+"ipc.(*Conn).Send"), false,
			Booking{"serialize", "ipc.serialize/request", ByStack}},
		{"entry, host", add(nil, "memmove", mod+"ipc.(*Reader).ReadBody", "loop"), true, Booking{"receive", "taskhost.receive/request", ByStack}},
		{"client writer", add(nil, "syscall", loopy, grpcTransport+"NewHTTP2Client.func6"), false, Booking{"send", "chunking.send/request", ByStack}},
		{"server writer", add(nil, "syscall", loopy, grpcTransport+"NewServerTransport.func3"), false, Booking{"send", "chunking.send/reply", ByStack}},
		{"generator", add(nil, "memmove", mod+"runtime/scenario.newText", "main.main"), false, Booking{BucketGenerator, "", InBucket}},
		{"accounting", add(nil, "strconv.AppendInt", "go.opentelemetry.io/otel/sdk/trace.(*recordingSpan).End"), false, Booking{BucketAccounting, "", InBucket}},
		{"gc", add(nil, "runtime.scanObject", "runtime.gcDrain", "runtime.gcBgMarkWorker"), false, Booking{BucketRuntime, "", InBucket}},
		{"race", add(nil, "__tsan_read", "runtime._System"), false, Booking{BucketRace, "", InBucket}},
		{"process", add(nil, "runtime.mallocgc", "main.main", "runtime.main"), false, Booking{BucketProcess, "", InBucket}},
		{"no stack", add(nil), false, Booking{NoPhase, "", ""}},
	} {
		if got := Book(tc.s, tc.host, true); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Heap samples: labels not read.
	if got := Book(add(labels, "x", mod+"ipc/taskproto.runTask"), true, false); got.Basis != ByStack || got.Phase != "execute" {
		t.Errorf("labels ignored: got %+v, want execute by stack", got)
	}
}
