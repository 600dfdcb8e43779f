package ipc_test

// The benchmarks run the Conn as the runtime does, with the task-host
// protocol installed (package taskproto imports ipc, hence package
// ipc_test and export_test.go).

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
)

// benchSizes is the seed's packet mix used by every benchmark.
var benchSizes = ipc.SeedSizes(256, 1)

func benchTotal() int64 {
	var n int64
	for _, s := range benchSizes {
		n += int64(s)
	}
	return n
}

// rawCopy streams the mix once with the baseline framing: writev header +
// body; read the header, then the body straight into a reused buffer.
func rawCopy(w, r *net.UnixConn, payload []byte, rbuf []byte) error {
	done := make(chan error, 1)
	go func() {
		var hdr [ipc.HeaderSize]byte
		for range benchSizes {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				done <- err
				return
			}
			n := int(binary.LittleEndian.Uint32(hdr[1:]))
			if _, err := io.ReadFull(r, rbuf[:n]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var hdr [ipc.HeaderSize]byte
	for _, s := range benchSizes {
		hdr[0] = byte(ipc.TypeTaskConfiguration)
		binary.LittleEndian.PutUint32(hdr[1:], uint32(s))
		bufs := net.Buffers{hdr[:], payload[:s]}
		if _, err := bufs.WriteTo(w); err != nil {
			return err
		}
	}
	return <-done
}

// connCopy streams the mix once through the endpoint: Send on one Conn,
// Recv on the other, protobuf packets included.
func connCopy(ctx context.Context, parent, child *ipc.Conn, payload []byte) error {
	done := make(chan error, 1)
	go func() {
		for range benchSizes {
			if _, err := child.Recv(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i, s := range benchSizes {
		if err := parent.Send(ctx, &ipcpb.TaskConfiguration{Id: uint64(i), Payload: payload[:s]}); err != nil {
			return err
		}
	}
	if err := parent.Flush(ctx); err != nil {
		return err
	}
	return <-done
}

// framingCopy streams the mix once through the ipc framing layer only
// (Reader on the receiving side, prebuilt frames written whole): the
// endpoint's wire path with protobuf excluded.
func framingCopy(w, r *net.UnixConn, frames [][]byte, rd *ipc.Reader) error {
	done := make(chan error, 1)
	go func() {
		for range frames {
			t, n, err := rd.ReadHeader()
			if err == nil {
				_, err = rd.ReadBody(t, n)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return <-done
}

// BenchmarkStream compares, in one run, the raw framed copy with the ipc
// framing layer and with the full endpoint over the same kind of
// socketpair, and reports the ratios of their throughputs.
func BenchmarkStream(b *testing.B) {
	ctx := context.Background()
	payload := make([]byte, 1_500_000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	rbuf := make([]byte, 1_500_000)
	rw, rr := ipc.Socketpair(b)
	fw, fr := ipc.Socketpair(b)
	for _, c := range []*net.UnixConn{rw, fw} {
		if _, err := ipc.ApplySendBuffer(c, ipc.DefaultBufferSize); err != nil {
			b.Fatal(err)
		}
	}
	frames := make([][]byte, len(benchSizes))
	for i, s := range benchSizes {
		f := make([]byte, ipc.HeaderSize, ipc.HeaderSize+s)
		f[0] = byte(ipc.TypeTaskConfiguration)
		binary.LittleEndian.PutUint32(f[1:], uint32(s))
		frames[i] = append(f, payload[:s]...)
	}
	rd := ipc.NewReader(fr, ipc.DefaultMaxPacketSize)
	parent, child := ipc.InProcessPair(b,
		[]ipc.Option{ipc.WithBufferSize(ipc.DefaultBufferSize), taskproto.WithCodec(taskproto.WithDelta(false))},
		[]ipc.Option{ipc.WithBufferSize(ipc.DefaultBufferSize), taskproto.WithCodec()})
	var raw, framing, conn time.Duration
	b.SetBytes(benchTotal())
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := rawCopy(rw, rr, payload, rbuf); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := framingCopy(fw, fr, frames, rd); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := connCopy(ctx, parent, child, payload); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		raw, framing, conn = raw+t1.Sub(t0), framing+t2.Sub(t1), conn+t3.Sub(t2)
	}
	mb := func(d time.Duration) float64 { return float64(benchTotal()) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mb(raw), "raw-MB/s")
	b.ReportMetric(mb(framing), "framing-MB/s")
	b.ReportMetric(mb(conn), "conn-MB/s")
	b.ReportMetric(raw.Seconds()/framing.Seconds(), "framing/raw")
	b.ReportMetric(raw.Seconds()/conn.Seconds(), "conn/raw")
}

// workingChild serves configurations like a task host that deserializes
// for real: it hashes every payload (≈1 ns/B of work) before replying.
func workingChild(ctx context.Context, c *ipc.Conn, n int, done chan<- error) {
	for range n {
		in, err := c.Recv(ctx)
		if err != nil {
			done <- err
			return
		}
		cfg := in.Msg.(*ipcpb.TaskConfiguration)
		start := time.Now()
		sum := sha256.Sum256(cfg.Payload)
		if err := taskproto.Reply(ctx, c, in, &ipcpb.TaskResult{Id: cfg.Id, Outputs: map[string]string{"h": fmt.Sprintf("%x", sum[:4])}}, start, time.Since(start)); err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

// BenchmarkBuffer is the seed's experiment on Linux: the parent streams the
// mix to a child that does real work per packet, with the sender's
// SO_SNDBUF at 128 KiB and 1 MiB; it reports the time the caller spent in
// Send (serialize + blocked writing) and the end-to-end time, per packet,
// and the 128 KiB / 1 MiB ratios of both.
func BenchmarkBuffer(b *testing.B) {
	for _, mode := range []ipc.Mode{ipc.Sync, ipc.Async} {
		b.Run(mode.String(), func(b *testing.B) {
			res := map[int][2]time.Duration{}
			for _, size := range []int{ipc.SmallBuffer, ipc.DefaultBufferSize} {
				parent, child := ipc.InProcessPair(b,
					[]ipc.Option{ipc.WithBufferSize(size), ipc.WithMode(mode), taskproto.WithCodec()},
					[]ipc.Option{ipc.WithBufferSize(size), taskproto.WithCodec()})
				send, e2e := streamWorking(b, parent, child)
				res[size] = [2]time.Duration{send, e2e}
			}
			n := float64(b.N * len(benchSizes))
			for _, size := range []int{ipc.SmallBuffer, ipc.DefaultBufferSize} {
				b.ReportMetric(float64(res[size][0].Nanoseconds())/n, fmt.Sprintf("send-ns/pkt@%dKiB", size>>10))
				b.ReportMetric(float64(res[size][1].Nanoseconds())/n, fmt.Sprintf("e2e-ns/pkt@%dKiB", size>>10))
			}
			b.ReportMetric(res[ipc.SmallBuffer][0].Seconds()/res[ipc.DefaultBufferSize][0].Seconds(), "send-128K/1M")
			b.ReportMetric(res[ipc.SmallBuffer][1].Seconds()/res[ipc.DefaultBufferSize][1].Seconds(), "e2e-128K/1M")
		})
	}
}

func streamWorking(b *testing.B, parent, child *ipc.Conn) (send, e2e time.Duration) {
	ctx := context.Background()
	payload := make([]byte, 1_500_000)
	// b.N, not b.Loop: the benchmark measures two configurations in turn.
	for range b.N {
		done := make(chan error, 1)
		go workingChild(ctx, child, len(benchSizes), done)
		recvd := make(chan error, 1)
		go func() {
			for range benchSizes {
				if _, err := parent.Recv(ctx); err != nil {
					recvd <- err
					return
				}
			}
			recvd <- nil
		}()
		start := time.Now()
		for i, s := range benchSizes {
			t0 := time.Now()
			if err := parent.Send(ctx, &ipcpb.TaskConfiguration{Id: uint64(i), Payload: payload[:s]}); err != nil {
				b.Fatal(err)
			}
			send += time.Since(t0)
		}
		if err := <-recvd; err != nil {
			b.Fatal(err)
		}
		e2e += time.Since(start)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	return send, e2e
}

// BenchmarkOneWrite times one write(2) of a frame to a socketpair with
// the default send buffer, whose reader waits in read(2), as a task
// host's parent waits for its reply: write-ns is the Write call alone
// (the kernel's copy and the reader's wake-up), the time a stamped frame
// within the one-write limit spends past its send's end
// (ipc.AttrWriteDuration). The reader drains each frame before the next
// write, so no write waits for buffer space. size=16384 is the largest
// frame written so (oneWriteMax); size=256 a task host's reply.
func BenchmarkOneWrite(b *testing.B) {
	for _, size := range []int{256, 16 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			w, r := ipc.Socketpair(b)
			if _, err := ipc.ApplySendBuffer(w, ipc.DefaultBufferSize); err != nil {
				b.Fatal(err)
			}
			frame := make([]byte, size)
			drained := make(chan error)
			go func() {
				buf := make([]byte, size)
				for {
					_, err := io.ReadFull(r, buf)
					drained <- err
					if err != nil {
						return
					}
				}
			}()
			var wrote time.Duration
			b.SetBytes(int64(size))
			for b.Loop() {
				t0 := time.Now()
				if _, err := w.Write(frame); err != nil {
					b.Fatal(err)
				}
				wrote += time.Since(t0)
				if err := <-drained; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(wrote.Nanoseconds())/float64(b.N), "write-ns")
			_ = w.Close()
			<-drained
		})
	}
}
