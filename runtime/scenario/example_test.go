package scenario_test

import (
	"fmt"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
)

func ExampleParse() {
	sc, err := scenario.Parse("tiny.yaml", []byte(`
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
	_, err = scenario.Parse("bad.yaml", []byte("name: bad\ncount: -1\nworkloads: []\n"))
	fmt.Println(err)
	// Output:
	// 0 fanout small [1024 1024 1024 1024]
	// 1 fanout small [1024 1024 1024 1024]
	// 2 fanout small [1024 1024 1024 1024]
	// bad.yaml:2:1: count: -1 is out of range (valid: 1..10000000)
}
