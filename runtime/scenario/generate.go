package scenario

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"unsafe"
)

// Item is one unit of work drawn from a Scenario.
type Item struct {
	Seq      int         // 0-based index within the run
	Kind     Kind        // the workload's kind
	Workload int         // index into Scenario.Workloads
	Shape    string      // fanout shape name; "" for tasks
	Task     *TaskItem   // set iff Kind == KindTask
	Fanout   *FanoutItem // set iff Kind == KindFanout
}

// TaskItem is a task's configuration. Parameters is the item's own map;
// Environment is shared and read-only.
type TaskItem struct {
	// TaskName is the task the host runs; "" means runtime.TaskHash (the
	// built-in CPU work of the taskhost scenario). Other names need a host
	// that serves them (runtime.ServeHost with tasks of its own).
	TaskName    string
	ConfigBytes int // the sampled configuration size
	// Parameters maps "p0".."pN-1" to values whose lengths add up to
	// ConfigBytes exactly. The values are substrings of the generator's
	// shared text, not copies.
	Parameters map[string]string
	// Environment maps "VAR_000", "VAR_001", ... to values; keys and values
	// together take EnvironmentBytes (a few bytes less when the last entry
	// cannot fit). It is the same map instance on every item of the
	// workload and must not be modified.
	Environment   map[string]string
	ExecutePasses int
	// Orchestration runs the task inside a Durable Task orchestration
	// (Workload.Orchestration): lease before, completion after. False
	// sends it straight to a host.
	Orchestration bool
}

// FanoutItem is an orchestration completion.
type FanoutItem struct {
	// ActionBytes is the payload size of each action, in order. It is shared
	// by every item of the shape and must not be modified.
	ActionBytes []int

	gen  *Generator // the text payloads come from; nil for items built by hand
	salt int
}

// Payload returns the payload of action i: ActionBytes[i] bytes of the
// generating Generator's text (shared, never copied), or, for an item built
// by hand, of a text shared by all such items. It panics if i is out of
// range or the size exceeds the text (at least 8 MiB).
func (f *FanoutItem) Payload(i int) string {
	g := f.gen
	if g == nil {
		g = handText()
	}
	return g.Text(f.ActionBytes[i], f.salt+i)
}

var (
	handOnce sync.Once
	handGen  *Generator
)

// handText is the text source of items built by hand, built on first use.
func handText() *Generator {
	handOnce.Do(func() {
		handGen = (&Scenario{Name: "payloads", Seed: 1, Count: 1, Workloads: []Workload{{Kind: KindFanout, Weight: 1,
			Fanout: &FanoutSpec{Shapes: []FanoutShape{{Name: "payload", Weight: 1, Actions: 1, ActionBytes: 1}}}}}}).NewGenerator()
	})
	return handGen
}

// Generator produces a scenario's units of work, deterministically: the same
// scenario (seed included) yields the same sequence of items, parameter
// values included.
type Generator struct {
	s    *Scenario // a validated copy, defaults applied
	rng  *rand.Rand
	seq  int
	pick chooser // of workloads
	work []genWorkload
	text string
}

// genWorkload is what a workload needs at generation time, built once.
type genWorkload struct {
	mu      float64           // of the log-normal (task)
	keys    []string          // parameter names (task)
	env     map[string]string // (task)
	shapes  chooser           // (fanout)
	actions [][]int           // per shape (fanout)
}

// chooser picks an index by weight.
type chooser []float64 // cumulative weights

func newChooser(weights []float64) chooser {
	c := make(chooser, len(weights))
	var sum float64
	for i, w := range weights {
		sum += w
		c[i] = sum
	}
	return c
}

func (c chooser) pick(r *rand.Rand) int {
	if len(c) == 1 {
		return 0 // no draw: adding a second workload is what changes the sequence
	}
	u := r.Float64() * c[len(c)-1]
	return min(sort.Search(len(c), func(i int) bool { return c[i] > u }), len(c)-1)
}

// PCG stream selectors, so that the item sequence, the text and each
// environment are independent streams of the same seed.
const (
	itemStream = 0x616d6461686c2d69 // "amdahl-i"
	textStream = 0x616d6461686c2d74 // "amdahl-t"
	envStream  = 0x616d6461686c2d65 // "amdahl-e"
)

// minTextBytes is the least shared text length: 8 MiB, more than the largest
// action a shape may ask for.
const minTextBytes = 8 << 20

// textAlphabet has 64 printable characters that need no escaping in JSON,
// XML or a shell.
const textAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// NewGenerator returns a generator of s's units of work. It works on a copy:
// later changes to s do not affect it. It builds the shared text (at least
// 8 MiB), each task workload's environment and each shape's action sizes
// up front, and nothing per unit of work: what it allocates is bounded by
// the limits Validate enforces (the text at most 64 MiB, the environments
// at most 64 MiB together, 1,000,000 action sizes), whatever the Count.
// NewGenerator panics
// if s is invalid (Validate returns an error); scenarios from Parse,
// Load and Builtin are valid.
func (s *Scenario) NewGenerator() *Generator {
	c := s.clone()
	c.applyDefaults()
	if err := c.validate(); err != nil {
		panic(fmt.Sprintf("scenario: NewGenerator: invalid scenario: %v", err))
	}
	g := &Generator{
		s:   c,
		rng: rand.New(rand.NewPCG(c.Seed, itemStream)),
	}
	textBytes, params := minTextBytes, 0
	weights := make([]float64, len(c.Workloads))
	for i, w := range c.Workloads {
		weights[i] = w.Weight
		if t := w.Task; t != nil {
			textBytes = max(textBytes, (t.ConfigCapBytes+t.Parameters-1)/t.Parameters)
			params = max(params, t.Parameters)
		}
	}
	g.pick = newChooser(weights)
	g.text = newText(c.Seed, textBytes)
	// Parameter names, shared by the task workloads: each takes a prefix.
	keys := make([]string, params)
	for j := range keys {
		keys[j] = "p" + strconv.Itoa(j)
	}
	g.work = make([]genWorkload, len(c.Workloads))
	for i, w := range c.Workloads {
		gw := &g.work[i]
		switch w.Kind {
		case KindTask:
			t := w.Task
			gw.mu = math.Log(float64(t.ConfigMeanBytes)) - t.ConfigSigma*t.ConfigSigma/2
			gw.keys = keys[:t.Parameters:t.Parameters]
			gw.env = g.environment(c.Seed, i, t.EnvironmentBytes)
		case KindFanout:
			sw := make([]float64, len(w.Fanout.Shapes))
			gw.actions = make([][]int, len(w.Fanout.Shapes))
			for j, sh := range w.Fanout.Shapes {
				sw[j] = sh.Weight
				a := slices.Repeat([]int{sh.ActionBytes}, sh.Actions)
				if sh.FirstActionBytes > 0 {
					a[0] = sh.FirstActionBytes
				}
				gw.actions[j] = a
			}
			gw.shapes = newChooser(sw)
		}
	}
	return g
}

// newText returns n bytes of pseudo-random text over textAlphabet, from
// seed's text stream: byte i is textAlphabet[(x>>(6*(i%8)))&63], x being
// the stream's (i/8)th value, so each byte carries 6 random bits,
// independent of every other byte's. Eight bytes are made at once from
// one value, two at a time through textPairs.
func newText(seed uint64, n int) string {
	r := rand.NewPCG(seed, textStream)
	b := make([]byte, n)
	i := 0
	for ; i+8 <= n; i += 8 {
		x := r.Uint64()
		binary.LittleEndian.PutUint64(b[i:], uint64(textPairs[x&0xFFF])|uint64(textPairs[x>>12&0xFFF])<<16|
			uint64(textPairs[x>>24&0xFFF])<<32|uint64(textPairs[x>>36&0xFFF])<<48)
	}
	if i < n {
		x := r.Uint64()
		for ; i < n; i++ {
			b[i] = textAlphabet[x&63]
			x >>= 6
		}
	}
	// b is not written again: the string takes its memory, not a copy.
	return unsafe.String(unsafe.SliceData(b), n)
}

// textPairs maps 12 bits to two bytes of text (little-endian): the low 6
// bits' letter, then the high 6 bits'.
var textPairs = func() (t [1 << 12]uint16) {
	for v := range t {
		t[v] = uint16(textAlphabet[v&63]) | uint16(textAlphabet[v>>6])<<8
	}
	return t
}()

// environment builds a task workload's environment: entries of random value
// lengths until size bytes of keys and values are used.
func (g *Generator) environment(seed uint64, workload, size int) map[string]string {
	r := rand.New(rand.NewPCG(seed, envStream+uint64(workload)))
	env := make(map[string]string)
	const minValue, maxValue = 4, 200
	used := 0
	for i := 0; ; i++ {
		key := fmt.Sprintf("VAR_%03d", i)
		left := size - used - len(key)
		if left < 1 {
			return env
		}
		n := minValue + r.IntN(maxValue-minValue+1)
		// Take the rest when another entry would not fit after this one.
		if n >= left || left-n < len(key)+1+minValue {
			n = left
		}
		env[key] = g.Text(n, int(r.Uint64()>>2))
		used += len(key) + n
	}
}

// Next returns the next unit of work. The sequence never ends; the caller
// stops at Scenario.Count. Next is not safe for concurrent use.
func (g *Generator) Next() Item {
	wi := g.pick.pick(g.rng)
	w := &g.s.Workloads[wi]
	gw := &g.work[wi]
	it := Item{Seq: g.seq, Kind: w.Kind, Workload: wi}
	g.seq++
	switch w.Kind {
	case KindTask:
		t := w.Task
		x := math.Exp(gw.mu + t.ConfigSigma*g.rng.NormFloat64())
		// Clamp as a float: exp may be far beyond int range.
		size := int(math.Round(math.Min(math.Max(x, float64(t.ConfigMinBytes)), float64(t.ConfigCapBytes))))
		salt := int(g.rng.Uint64() >> 2)
		params := make(map[string]string, len(gw.keys))
		base, rem := size/len(gw.keys), size%len(gw.keys)
		for j, k := range gw.keys {
			n := base
			if j < rem {
				n++
			}
			params[k] = g.Text(n, salt+j)
		}
		it.Task = &TaskItem{ConfigBytes: size, Parameters: params, Environment: gw.env, ExecutePasses: t.ExecutePasses, Orchestration: w.Orchestration}
	case KindFanout:
		si := gw.shapes.pick(g.rng)
		it.Shape = w.Fanout.Shapes[si].Name
		it.Fanout = &FanoutItem{ActionBytes: gw.actions[si], gen: g, salt: int(g.rng.Uint64() >> 2)}
	}
	return it
}

// Text returns a substring of length n of the generator's shared
// pseudo-random printable text, starting at an offset derived from salt: the
// same (n, salt) always gives the same string. It does not allocate. The text
// is at least 8 MiB long (longer if a task's parameter can be larger). Text
// panics if n is negative or longer than the text. Unlike Next, Text is safe
// for concurrent use.
func (g *Generator) Text(n, salt int) string {
	if n < 0 || n > len(g.text) {
		panic(fmt.Sprintf("scenario: Generator.Text: length %d out of range [0, %d]", n, len(g.text)))
	}
	off := mix64(uint64(salt)) % uint64(len(g.text)-n+1)
	return g.text[off : off+uint64(n)]
}

// mix64 is the SplitMix64 finalizer: nearby salts give unrelated offsets.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
