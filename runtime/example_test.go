package runtime_test

import (
	"fmt"

	"github.com/amdahl-rt/amdahl/runtime"
)

func ExampleResolveSettings() {
	env := map[string]string{"AMDAHL_IPC_SEND": "async", "AMDAHL_RUNTIME_NODES": "3"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	s, err := runtime.ResolveSettings([]string{"runtime.nodes=4", "ipc.buffer=256KiB"}, lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{"ipc.send", "ipc.buffer", "runtime.nodes"} {
		v, _ := s.Get(name)
		fmt.Printf("%s=%s\n", name, v)
	}
	_, err = runtime.ResolveSettings([]string{"ipc.send=fast"}, lookup)
	fmt.Println(err)
	// Output:
	// ipc.send=async
	// ipc.buffer=262144
	// runtime.nodes=4
	// invalid value "fast" for setting ipc.send (from --set): want sync or async
}

func ExampleParseScenario() {
	sc, err := runtime.ParseScenario("tiny.yaml", []byte(`
name: tiny
seed: 7
count: 3
workloads:
  - kind: fanout
    fanout:
      shapes:
        - {name: small, actions: 4, action_bytes: 1KiB}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	gen := sc.NewGenerator()
	for range sc.Count {
		it := gen.Next()
		fmt.Println(it.Seq, it.Kind, it.Shape, it.Fanout.ActionBytes)
	}
	_, err = runtime.ParseScenario("bad.yaml", []byte("name: bad\ncount: -1\nworkloads: []\n"))
	fmt.Println(err)
	// Output:
	// 0 fanout small [1024 1024 1024 1024]
	// 1 fanout small [1024 1024 1024 1024]
	// 2 fanout small [1024 1024 1024 1024]
	// bad.yaml:2:1: count: -1 is out of range (valid: ≥ 1)
}
