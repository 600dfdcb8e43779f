package taskproto

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// BenchmarkDelta measures, for a configuration with the seed's ≈6 KB
// environment, the bytes per packet and the encode+decode time per packet
// (the codec's work inside ipc.serialize and ipc.deserialize, the receive
// side's baseline restore included) with delta encoding on and off.
func BenchmarkDelta(b *testing.B) {
	env := map[string]string{}
	for i := range 100 {
		env[fmt.Sprintf("VAR_%03d", i)] = strings.Repeat("v", 50)
	}
	props := map[string]string{"Configuration": "Release", "CurrentSolutionConfigurationContents": string(make([]byte, 4000))}
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("delta=%v", on), func(b *testing.B) {
			enc, dec := &codec{delta: on}, &codec{delta: true}
			var bytes int
			for b.Loop() {
				m := &ipcpb.TaskConfiguration{Id: 1, TaskName: "Csc", Environment: env, GlobalProperties: props, Payload: make([]byte, 46_000)}
				frame, err := enc.AppendBody(ctx, []byte{byte(ipc.TypeTaskConfiguration), 0, 0, 0, 0}, ipc.TypeTaskConfiguration, m)
				if err != nil {
					b.Fatal(err)
				}
				bytes += len(frame)
				if _, err := dec.Decode(ipc.TypeTaskConfiguration, frame[ipc.HeaderSize:]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/pkt")
		})
	}
}
