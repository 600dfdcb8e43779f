package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// newTaskhostCmd is the hidden child mode: amdahl run spawns this binary
// as "amdahl taskhost" with a connection and a token in its environment.
func newTaskhostCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "taskhost",
		Short:  "Serve tasks for an amdahl parent (started by amdahl run, not by hand)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := runtime.ServeHost(cmd.Context(), runtime.BuiltinTasks())
			if errors.Is(err, ipc.ErrNotChild) {
				return usageError{err}
			}
			return err
		},
	}
}

func newSidecarCmd() *cobra.Command {
	var listen, metricsAddr string
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run the Durable Task sidecar (TaskHubSidecarService) standalone",
		Long: `sidecar serves TaskHubSidecarService on --listen: StartInstance, GetWorkItems,
CompleteOrchestratorTask (chunked completions reassembled by completion token)
and AbandonTaskOrchestratorWorkItem, wire-compatible with Durable Task workers.
amdahl run --sidecar ADDR completes to it. It runs until interrupted, then
prints how many completions it applied. Telemetry follows the standard
environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, AMDAHL_METRICS_ADDR, …).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			opts := []telemetry.Option{telemetry.WithServiceName("amdahl-sidecar")}
			if metricsAddr != "" {
				opts = append(opts, telemetry.WithMetricsAddr(metricsAddr))
			}
			tel, err := telemetry.Setup(ctx, opts...)
			if err != nil {
				return err
			}
			defer tel.Shutdown(context.WithoutCancel(ctx))
			comp, err := tel.Component("chunking", telemetry.AttrTransport.String(runtime.TransportChunking))
			if err != nil {
				return err
			}
			sc, err := chunking.NewSidecar(chunking.SidecarConfig{Component: comp,
				TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider()})
			if err != nil {
				return err
			}
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return usageError{fmt.Errorf("--listen %s: %w", listen, err)}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: listening on %s\n", lis.Addr())
			served := make(chan error, 1)
			go func() { served <- sc.Serve(lis) }()
			// Keep no payloads: count completions as they are applied.
			applied := 0
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					applied += len(sc.DrainCompletions())
					continue
				case err := <-served:
					sc.Close()
					return err
				case <-ctx.Done():
				}
				break
			}
			sc.Close()
			applied += len(sc.DrainCompletions())
			slog.Debug("sidecar stopped")
			fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: stopped; %d completions applied\n", applied)
			return <-served
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4001", "address to serve gRPC on (host:port; port 0 picks one)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on host:port")
	return cmd
}

func newScenariosCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "scenarios",
		Short: "List the built-in scenarios",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUNITS\tSEED\tWORKLOADS\tDESCRIPTION")
			for _, s := range runtime.BuiltinScenarios() {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.Name, s.Count, s.Seed, describeWorkloads(s), s.Description)
			}
			return tw.Flush()
		},
	}
}

func describeWorkloads(s *runtime.Scenario) string {
	out := ""
	for i, w := range s.Workloads {
		if i > 0 {
			out += "; "
		}
		switch w.Kind {
		case runtime.KindTask:
			out += fmt.Sprintf("taskhost×%g (config mean %s cap %s, env %s)", w.Weight,
				runtime.FormatSize(w.Task.ConfigMeanBytes), runtime.FormatSize(w.Task.ConfigCapBytes), runtime.FormatSize(w.Task.EnvironmentBytes))
		case runtime.KindFanout:
			out += fmt.Sprintf("fanout×%g (", w.Weight)
			for j, sh := range w.Fanout.Shapes {
				if j > 0 {
					out += ", "
				}
				out += sh.Name
			}
			out += ")"
		}
	}
	return out
}
