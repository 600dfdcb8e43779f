// Command instrument-your-code is a program of one's own instrumented with
// amdahl's phase API (package telemetry) and nothing else of amdahl's: a
// three-stage pipeline whose units of work go into an OTLP JSON trace file
// that `amdahl report` reads.
//
// Each unit of work encodes a batch of orders in parts (serialize), ships
// every part over a link paced at a fixed rate on a second goroutine as soon
// as it is ready (send: it overlaps the serializing of the next part), and,
// once the last part has arrived, decodes and totals them (execute). The
// pipeline itself takes a *telemetry.Component, as a library would; main
// alone wires the OpenTelemetry SDK, with telemetry/otelsetup.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"go.opentelemetry.io/otel/attribute"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("instrument-your-code", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trace := fs.String("trace", "", "write the trace (OTLP JSON lines) to this file (default: trace.jsonl in a new temporary directory)")
	units := fs.Int("units", 36, "units of work to run (1 to 10000)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *units < 1 || *units > 10000 {
		fmt.Fprintf(stderr, "instrument-your-code: --units %d: want 1 to 10000\n", *units)
		return 2
	}
	path, total, err := run(ctx, *trace, *units)
	if err != nil {
		fmt.Fprintln(stderr, "instrument-your-code:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d units of work, orders worth %.2f in all, traced to %s\nsee where their time went:\n    go run ./cmd/amdahl report %s\n",
		*units, total, path, path)
	return 0
}

// run sets up the process's telemetry, runs the units one after another and
// flushes the trace file; it returns the file's path and the value of all
// the orders.
func run(ctx context.Context, path string, units int) (_ string, total float64, err error) {
	if path == "" {
		dir, err := os.MkdirTemp("", "instrument-your-code-")
		if err != nil {
			return "", 0, err
		}
		path = filepath.Join(dir, "trace.jsonl")
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", 0, err
	}
	// The process's SDK: the standard OTEL_* variables apply too (an OTLP
	// endpoint, say); the option names the trace file whatever
	// AMDAHL_TRACE_FILE says.
	tel, err := otelsetup.Setup(ctx, otelsetup.WithServiceName("instrument-your-code"), otelsetup.WithTraceFile(path))
	if err != nil {
		return "", 0, err
	}
	defer func() {
		// Shutdown flushes every span to the file: without it the file
		// may lack the last batch.
		err = errors.Join(err, tel.Shutdown(context.WithoutCancel(ctx)))
	}()
	comp, err := telemetry.NewComponent("pipeline", telemetry.ComponentConfig{
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), PhaseLabels: true,
		Attributes: []attribute.KeyValue{telemetry.AttrScenario.String("instrument-your-code")},
	})
	if err != nil {
		return "", 0, err
	}
	p := pipeline{tel: comp, parts: 8, ordersPerPart: 600, rate: 96 << 20}
	for i := range units {
		t, err := p.process(ctx, i)
		if err != nil {
			return "", 0, fmt.Errorf("unit %d: %w", i, err)
		}
		total += t
	}
	return path, total, nil
}

// order is the record the pipeline moves.
type order struct {
	ID       int     `json:"id"`
	Customer string  `json:"customer"`
	SKU      string  `json:"sku"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"price"`
}

// pipeline is the instrumented code. A nil tel records nothing: the code
// runs the same with telemetry off.
type pipeline struct {
	tel           *telemetry.Component
	parts         int     // parts per unit of work
	ordersPerPart int     // orders per part
	rate          float64 // the link's pace, bytes per second
}

// process runs one unit of work: serialize the parts on this goroutine,
// send each on another as soon as it is ready, then execute. It returns the
// total value of the unit's orders.
func (p pipeline) process(ctx context.Context, unit int) (total float64, err error) {
	ctx, work := p.tel.StartWork(ctx, telemetry.AttrWorkID.Int(unit))
	defer func() {
		if err != nil {
			work.End(telemetry.Failed, err)
			return
		}
		work.End(telemetry.OK, nil)
	}()

	parts := make(chan []byte, p.parts)
	var wire bytes.Buffer // the link's far end
	sent := make(chan error, 1)
	go func() { sent <- p.send(ctx, parts, &wire) }()

	serr := p.serialize(ctx, unit, parts)
	close(parts)
	if err := errors.Join(serr, <-sent); err != nil {
		return 0, err
	}
	return p.execute(ctx, &wire)
}

// serialize encodes each part in its own phase span and hands it to send.
func (p pipeline) serialize(ctx context.Context, unit int, parts chan<- []byte) error {
	for part := range p.parts {
		_, ph := p.tel.Start(ctx, telemetry.Serialize, telemetry.Request)
		orders := make([]order, p.ordersPerPart)
		for i := range orders {
			id := (unit*p.parts+part)*p.ordersPerPart + i
			orders[i] = order{ID: id, Customer: fmt.Sprintf("customer-%04d", id%997), SKU: fmt.Sprintf("sku-%05d", id%7919),
				Quantity: 1 + id%5, Price: float64(100+id%900) / 100}
		}
		b, err := json.Marshal(orders)
		if err != nil {
			ph.End(telemetry.WithError(err))
			return fmt.Errorf("serialize part %d: %w", part, err)
		}
		ph.Span().SetAttributes(telemetry.AttrBytes.Int(len(b)))
		ph.End()
		parts <- b
	}
	return nil
}

// send ships each part, length-prefixed, over the link to w, each in its own
// phase span on this goroutine: the span starts when the part is ready, so
// the next part's serialize runs while this one is on the link. The link is
// paced at p.rate, as a network of that bandwidth would be; it drains parts
// even after a failure so that serialize never blocks.
func (p pipeline) send(ctx context.Context, parts <-chan []byte, w io.Writer) error {
	var err error
	for b := range parts {
		if err != nil {
			continue
		}
		_, ph := p.tel.Start(ctx, telemetry.Send, telemetry.Request)
		ph.Span().SetAttributes(telemetry.AttrBytes.Int(len(b)))
		if _, err = fmt.Fprintf(w, "%d\n%s", len(b), b); err != nil {
			ph.End(telemetry.WithError(err))
			continue
		}
		pace := time.NewTimer(time.Duration(float64(len(b)) / p.rate * float64(time.Second)))
		select {
		case <-pace.C:
			ph.End()
		case <-ctx.Done():
			pace.Stop()
			err = ctx.Err()
			ph.End(telemetry.WithError(err))
		}
	}
	return err
}

// execute decodes every part that arrived and totals the orders.
func (p pipeline) execute(ctx context.Context, wire *bytes.Buffer) (float64, error) {
	_, ph := p.tel.Start(ctx, telemetry.Execute, telemetry.None)
	var total float64
	for part := 0; wire.Len() > 0; part++ {
		var n int
		if _, err := fmt.Fscanf(wire, "%d\n", &n); err != nil || n < 0 || n > wire.Len() {
			err = fmt.Errorf("execute: part %d: bad length prefix (%d bytes left): %v", part, wire.Len(), err)
			ph.End(telemetry.WithError(err))
			return 0, err
		}
		var orders []order
		if err := json.Unmarshal(wire.Next(n), &orders); err != nil {
			err = fmt.Errorf("execute: part %d: %w", part, err)
			ph.End(telemetry.WithError(err))
			return 0, err
		}
		for _, o := range orders {
			total += float64(o.Quantity) * o.Price
		}
	}
	ph.End()
	return total, nil
}
