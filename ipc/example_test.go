package ipc_test

import (
	"errors"
	"fmt"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

func ExampleParseBufferSize() {
	for _, s := range []string{"262144", " 256KiB ", "1MiB", "1.5MiB", "1MB"} {
		n, err := ipc.ParseBufferSize(s)
		fmt.Println(n, err)
	}
	_, err := ipc.ParseBufferSize("2GiB")
	fmt.Println(err)
	// Output:
	// 262144 <nil>
	// 262144 <nil>
	// 1048576 <nil>
	// 1572864 <nil>
	// 1000000 <nil>
	// invalid ipc.buffer "2GiB": want a positive size up to 1073741824 bytes (1GiB): a whole number of bytes, or a number with unit B, KB, MB, GB, KiB, MiB, GiB (e.g. 262144, 256KiB, 1.5MiB)
}

func ExampleDecodePacket() {
	frame, err := ipc.AppendFrame(nil, &ipcpb.LogMessage{Text: "hello"}, ipc.DefaultMaxPacketSize)
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", frame[:ipc.HeaderSize])
	m, err := ipc.DecodePacket(frame, ipc.DefaultMaxPacketSize)
	fmt.Println(m.(*ipcpb.LogMessage).GetText(), err)
	_, err = ipc.DecodePacket(frame[:len(frame)-1], ipc.DefaultMaxPacketSize)
	fmt.Println(err)
	_, err = ipc.DecodePacket(frame, 4)
	fmt.Println(errors.Is(err, ipc.ErrPacketTooLarge))
	// Output:
	// 03 07 00 00 00
	// hello <nil>
	// ipc: decode log_message body: 6 of 7 bytes: unexpected EOF
	// true
}
