package scenario

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func mustBuiltin(t testing.TB, name string) *Scenario {
	t.Helper()
	s, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGeneratorDeterministic(t *testing.T) {
	s := mustBuiltin(t, "mixed")
	a, b := s.NewGenerator(), s.NewGenerator()
	kinds := map[Kind]int{}
	var first []Item
	for i := range 400 {
		x, y := a.Next(), b.Next()
		if x.Seq != i {
			t.Fatalf("Seq: got %d, want %d", x.Seq, i)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("item %d: got %+v and %+v from two generators of one scenario, want equal", i, x, y)
		}
		kinds[x.Kind]++
		first = append(first, x)
	}
	if kinds[KindTask] == 0 || kinds[KindFanout] == 0 {
		t.Fatalf("kinds: got %v, want both taskhost and fanout in 400 items of mixed", kinds)
	}

	// A change of seed changes the sequence.
	s.Seed = 2
	c := s.NewGenerator()
	same := 0
	for i := range 400 {
		x := c.Next()
		if reflect.DeepEqual(x, first[i]) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seed 2: got %d of 400 items equal to seed 1's, want nearly none", same)
	}
	if a.Text(64, 5) == c.Text(64, 5) {
		t.Errorf("Text: got the same text for seeds 1 and 2, want different")
	}
}

func TestGeneratorCopiesScenario(t *testing.T) {
	s := mustBuiltin(t, "taskhost")
	g := s.NewGenerator()
	s.Workloads[0].Task.ExecutePasses = 77
	if got := g.Next().Task.ExecutePasses; got != 2 {
		t.Errorf("after modifying the scenario: got %d passes, want 2", got)
	}
}

func TestGeneratorPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NewGenerator of an invalid scenario: got no panic, want one")
		}
	}()
	(&Scenario{Name: "x"}).NewGenerator()
}

func TestGeneratorTask(t *testing.T) {
	s := mustBuiltin(t, "taskhost")
	g := s.NewGenerator()
	const n = 20_000
	var sum float64
	var env map[string]string
	for i := range n {
		it := g.Next()
		if it.Kind != KindTask || it.Task == nil || it.Fanout != nil || it.Shape != "" || it.Workload != 0 {
			t.Fatalf("item %d: got %+v, want a task of workload 0", i, it)
		}
		task := it.Task
		if task.Orchestration {
			t.Fatalf("item %d: Orchestration true, want false (taskhost goes straight to hosts)", i)
		}
		if task.ConfigBytes < 256 || task.ConfigBytes > 1_500_000 {
			t.Fatalf("item %d: got ConfigBytes %d, want 256..1500000", i, task.ConfigBytes)
		}
		sum += float64(task.ConfigBytes)
		if len(task.Parameters) != 8 {
			t.Fatalf("item %d: got %d parameters, want 8", i, len(task.Parameters))
		}
		total := 0
		for j := range 8 {
			v, ok := task.Parameters["p"+strconv.Itoa(j)]
			if !ok {
				t.Fatalf("item %d: parameter p%d missing from %d parameters", i, j, len(task.Parameters))
			}
			total += len(v)
		}
		if total != task.ConfigBytes {
			t.Fatalf("item %d: parameter values add up to %d bytes, want ConfigBytes %d", i, total, task.ConfigBytes)
		}
		if task.ExecutePasses != 2 {
			t.Fatalf("item %d: got ExecutePasses %d, want 2", i, task.ExecutePasses)
		}
		if i == 0 {
			env = task.Environment
		} else if reflect.ValueOf(task.Environment).UnsafePointer() != reflect.ValueOf(env).UnsafePointer() {
			t.Fatalf("item %d: got a different Environment map, want the same instance on every item", i)
		}
	}
	mean := sum / n
	if math.Abs(mean-46_000)/46_000 > 0.10 {
		t.Errorf("mean ConfigBytes over %d samples: got %.0f, want within 10%% of 46000", n, mean)
	}
	envBytes := 0
	for k, v := range env {
		if !strings.HasPrefix(k, "VAR_") {
			t.Errorf("environment key %q: want prefix VAR_", k)
		}
		envBytes += len(k) + len(v)
	}
	if envBytes < 6000-16 || envBytes > 6000 {
		t.Errorf("environment: got %d bytes in %d entries, want ≈ 6000 (5984..6000)", envBytes, len(env))
	}
}

// TestGeneratorTaskClamp uses a narrow window so that both bounds are hit.
func TestGeneratorTaskClamp(t *testing.T) {
	s := &Scenario{Name: "clamp", Count: 1, Workloads: []Workload{{Kind: KindTask, Task: &TaskSpec{
		ConfigMeanBytes: 46_000, ConfigSigma: 1, ConfigMinBytes: 40_000, ConfigCapBytes: 50_000, Parameters: 3,
	}}}}
	g := s.NewGenerator()
	atMin, atCap := 0, 0
	for range 2000 {
		it := g.Next()
		switch b := it.Task.ConfigBytes; {
		case b < 40_000 || b > 50_000:
			t.Fatalf("got ConfigBytes %d, want 40000..50000", b)
		case b == 40_000:
			atMin++
		case b == 50_000:
			atCap++
		}
		if len(it.Task.Environment) != 0 {
			t.Fatalf("got %d environment entries, want none (EnvironmentBytes 0)", len(it.Task.Environment))
		}
	}
	if atMin == 0 || atCap == 0 {
		t.Errorf("got %d samples at the floor and %d at the cap, want some of each", atMin, atCap)
	}
}

func TestGeneratorFanout(t *testing.T) {
	s := mustBuiltin(t, "fanout")
	shapes := s.Workloads[0].Fanout.Shapes
	g := s.NewGenerator()
	const n = 12_000
	count := map[string]int{}
	for i := range n {
		it := g.Next()
		if it.Kind != KindFanout || it.Fanout == nil || it.Task != nil {
			t.Fatalf("item %d: got %+v, want a fanout", i, it)
		}
		count[it.Shape]++
		j := slices.IndexFunc(shapes, func(sh FanoutShape) bool { return sh.Name == it.Shape })
		if j < 0 {
			t.Fatalf("item %d: got shape %q, want one of the spec's", i, it.Shape)
		}
		sh := shapes[j]
		a := it.Fanout.ActionBytes
		if len(a) != sh.Actions {
			t.Fatalf("item %d (%s): got %d actions, want %d", i, sh.Name, len(a), sh.Actions)
		}
		wantFirst := sh.ActionBytes
		if sh.FirstActionBytes > 0 {
			wantFirst = sh.FirstActionBytes
		}
		if a[0] != wantFirst {
			t.Fatalf("item %d (%s): got first action %d bytes, want %d", i, sh.Name, a[0], wantFirst)
		}
		for k, b := range a[1:] {
			if b != sh.ActionBytes {
				t.Fatalf("item %d (%s): got action %d of %d bytes, want %d", i, sh.Name, k+1, b, sh.ActionBytes)
			}
		}
	}
	if a := count["oversized-first"]; a == 0 {
		t.Fatalf("got no oversized-first items in %d", n)
	}
	for _, sh := range shapes {
		want := sh.Weight / 6 // the weights are 2, 1, 2, 1
		got := float64(count[sh.Name]) / n
		if math.Abs(got-want) > 0.02 {
			t.Errorf("shape %s: got frequency %.3f, want %.3f ± 0.02", sh.Name, got, want)
		}
	}
}

func TestGeneratorWorkloadWeights(t *testing.T) {
	s := mustBuiltin(t, "mixed")
	g := s.NewGenerator()
	const n = 20_000
	fanouts := 0
	for range n {
		if it := g.Next(); it.Kind == KindFanout {
			if it.Workload != 1 {
				t.Fatalf("got fanout from workload %d, want 1", it.Workload)
			}
			fanouts++
		}
	}
	if got := float64(fanouts) / n; math.Abs(got-0.05) > 0.01 {
		t.Errorf("fanout frequency: got %.3f, want 0.05 ± 0.01", got)
	}
}

func TestGeneratorText(t *testing.T) {
	g := mustBuiltin(t, "fanout").NewGenerator()
	big := g.Text(4_500_000, 1)
	if len(big) != 4_500_000 {
		t.Fatalf("Text(4500000): got length %d", len(big))
	}
	if i := strings.IndexFunc(big, func(r rune) bool { return !strings.ContainsRune(textAlphabet, r) }); i >= 0 {
		t.Fatalf("Text: got byte %q at %d, want only %q", big[i], i, textAlphabet)
	}
	if got := g.Text(8<<20, 12345); len(got) != 8<<20 {
		t.Fatalf("Text(8 MiB): got length %d, want %d", len(got), 8<<20)
	}
	if g.Text(100, 7) != g.Text(100, 7) {
		t.Errorf("Text(100, 7): got two different strings, want the same")
	}
	if g.Text(100, 7) == g.Text(100, 8) {
		t.Errorf("Text(100, 7) and Text(100, 8): got the same string, want different")
	}
	if g.Text(0, 3) != "" {
		t.Errorf("Text(0, 3): got %q, want empty", g.Text(0, 3))
	}
	var sink string
	if allocs := testing.AllocsPerRun(100, func() { sink = g.Text(1000, 99) }); allocs != 0 {
		t.Errorf("Text: got %v allocations per call, want 0", allocs)
	}
	_ = sink
	for _, n := range []int{len(g.text) + 1, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Text(%d): got no panic, want one", n)
				}
			}()
			g.Text(n, 0)
		}()
	}
}

// textByByte is newText one byte at a time: byte i is
// textAlphabet[(x>>(6*(i%8)))&63], x the text stream's (i/8)th value.
func textByByte(seed uint64, n int) string {
	r := rand.NewPCG(seed, textStream)
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		x := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = textAlphabet[x&63]
			x >>= 6
		}
	}
	return unsafe.String(unsafe.SliceData(b), n)
}

// TestNewText checks that newText's eight bytes at a time give the text
// byte by byte gives, for every length's remainder mod 8.
func TestNewText(t *testing.T) {
	for _, seed := range []uint64{0, 1, 7, 1 << 63} {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 1000, 4093, minTextBytes + 5} {
			if got, want := newText(seed, n), textByByte(seed, n); got != want {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("newText(%d, %d): byte %d is %q, want %q", seed, n, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkNewText measures building the default 8 MiB text, eight bytes
// at a time (newText) and byte by byte (textByByte), in one run.
func BenchmarkNewText(b *testing.B) {
	b.Run("words", func(b *testing.B) {
		b.SetBytes(minTextBytes)
		for b.Loop() {
			newText(1, minTextBytes)
		}
	})
	b.Run("bytes", func(b *testing.B) {
		b.SetBytes(minTextBytes)
		for b.Loop() {
			textByByte(1, minTextBytes)
		}
	})
}

// TestGeneratorLargeParameters checks that the text grows to fit a task
// whose single parameter is larger than 8 MiB.
func TestGeneratorLargeParameters(t *testing.T) {
	s := &Scenario{Name: "big", Count: 1, Workloads: []Workload{{Kind: KindTask, Task: &TaskSpec{
		ConfigMeanBytes: 12 << 20, ConfigSigma: 0.01, ConfigMinBytes: 10 << 20, ConfigCapBytes: 12 << 20, Parameters: 1,
	}}}}
	it := s.NewGenerator().Next()
	if got := len(it.Task.Parameters["p0"]); got != it.Task.ConfigBytes || got < 10<<20 {
		t.Errorf("got a %d-byte parameter for ConfigBytes %d, want equal and ≥ 10 MiB", got, it.Task.ConfigBytes)
	}
}

func TestFanoutPayload(t *testing.T) {
	sc, err := Builtin("fanout")
	if err != nil {
		t.Fatal(err)
	}
	a, b := sc.NewGenerator(), sc.NewGenerator()
	for range 20 {
		x, y := a.Next(), b.Next()
		for i, n := range x.Fanout.ActionBytes {
			p := x.Fanout.Payload(i)
			if len(p) != n {
				t.Fatalf("item %d action %d: payload of %d bytes, want %d", x.Seq, i, len(p), n)
			}
			if p != y.Fanout.Payload(i) {
				t.Fatalf("item %d action %d: payload differs between two generators of one seed", x.Seq, i)
			}
		}
	}
	hand := &FanoutItem{ActionBytes: []int{3, 1000}}
	if got := len(hand.Payload(1)); got != 1000 {
		t.Errorf("hand-built item: payload of %d bytes, want 1000", got)
	}
	if hand.Payload(0) != hand.Payload(0) {
		t.Error("hand-built item: payload not deterministic")
	}
}

// TestGeneratorOrchestration: a task item carries its workload's
// orchestration field (orchestrated orchestrates its tasks, taskhost and
// mixed do not).
func TestGeneratorOrchestration(t *testing.T) {
	for name, want := range map[string]bool{"taskhost": false, "mixed": false, "orchestrated": true} {
		g := mustBuiltin(t, name).NewGenerator()
		tasks := 0
		for range 200 {
			if it := g.Next(); it.Kind == KindTask {
				tasks++
				if it.Task.Orchestration != want {
					t.Fatalf("%s: item %d: Orchestration %v, want %v", name, it.Seq, it.Task.Orchestration, want)
				}
			}
		}
		if tasks == 0 {
			t.Fatalf("%s: no task item among 200", name)
		}
	}
}
