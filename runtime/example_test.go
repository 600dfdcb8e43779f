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
