package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/spf13/cobra"
)

func newReportCmd() *cobra.Command {
	var asJSON bool
	var baseline string
	cmd := &cobra.Command{
		Use:   "report FILE",
		Short: "Attribute the units of work in an OTLP JSON trace file",
		Long: `report reads an OTLP JSON trace file (one ExportTraceServiceRequest per line,
as written by amdahl's trace file or the OpenTelemetry Collector's file
exporter) and prints, per phase and direction, the span count, mean and p99
duration, the critical-path share q and the naive share.

With --baseline BASE, FILE is the candidate of an A/B pair: the report adds,
per phase, r (improvement of its critical time per unit of work), q·r
(predicted end-to-end gain) and the measured end-to-end gain.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("report takes one trace file, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cand, err := readReport(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if baseline == "" {
				if asJSON {
					return json.NewEncoder(out).Encode(cand)
				}
				return cand.WriteText(out)
			}
			base, err := readReport(baseline)
			if err != nil {
				return err
			}
			cmp := attribution.Compare(base, cand)
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{"baseline": base, "candidate": cand, "comparison": cmp})
			}
			return cmp.WriteText(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().StringVar(&baseline, "baseline", "", "trace file of the baseline run (A/B comparison)")
	return cmd
}

func readReport(path string) (attribution.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return attribution.Report{}, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	reqs, err := telemetry.ReadTraceFile(f)
	if err != nil {
		return attribution.Report{}, fmt.Errorf("report %s: %w", path, err)
	}
	spans := attribution.FromOTLP(reqs)
	works := attribution.Trees(spans)
	if len(works) == 0 {
		return attribution.Report{}, fmt.Errorf("report %s: no %s root spans among %d spans", path, telemetry.SpanWork, len(spans))
	}
	r := attribution.Summarize(works)
	r.WithP99(spans)
	return r, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print amdahl's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "amdahl %s\n", telemetry.Version)
			return err
		},
	}
}
