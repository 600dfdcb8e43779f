package main

import (
	"fmt"

	"github.com/amdahl-rt/amdahl/dashboards"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/spf13/cobra"
)

func newDashboardsCmd() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dashboards",
		Short: "Write amdahl's Grafana dashboards, Grafana provisioning and a compose file",
		Example: `  amdahl dashboards --out grafana
  cd grafana && docker compose up -d        # Grafana on http://127.0.0.1:3000 (see docs/grafana.md)
  amdahl run --metrics-addr 0.0.0.0:9464 --pyroscope http://127.0.0.1:4040 --otlp-endpoint http://127.0.0.1:4317`,
		Long: `dashboards writes into --out:

  dashboards/*.json                           the dashboards (classic v1 JSON): attribution,
                                              phases, ipc, chunking, profiles and traces
  grafana/provisioning/datasources/amdahl.yaml  Prometheus, Pyroscope, Tempo and Jaeger datasources
  grafana/provisioning/dashboards/amdahl.yaml   a file provider for dashboards/
  prometheus/prometheus.yml, tempo/tempo.yaml   their configuration
  compose.yaml                                  all of them, pinned images, ports on 127.0.0.1

The dashboards pick datasources through variables (ds_prometheus,
ds_pyroscope, ds_tempo, ds_jaeger) that default to the provisioned uids
` + dashboards.PrometheusUID + `, ` + dashboards.PyroscopeUID + `, ` + dashboards.TempoUID + ` and ` + dashboards.JaegerUID + `.
The compose file is not exercised in amdahl's CI; docs/grafana.md says how
to use it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			paths, err := dashboards.Write(out)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), dashboardsJSON{SchemaVersion: runtime.SchemaVersion, Files: paths})
			}
			for _, p := range paths {
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), p); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "grafana", "folder to write the dashboards, provisioning and compose files into")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the files written as JSON (docs/json.md) instead of one a line")
	return cmd
}
