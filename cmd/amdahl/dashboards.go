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
		Use:     "dashboards",
		Short:   "Write amdahl's Grafana dashboards as JSON for file provisioning",
		Example: `  amdahl dashboards --out dashboards/json   # then point Grafana's file provisioning at the folder`,
		Long: `dashboards writes the Grafana dashboards (classic v1 JSON) into --out.
They expect a Prometheus datasource with uid ` + dashboards.PrometheusUID + ` and a
Pyroscope datasource with uid ` + dashboards.PyroscopeUID + `.`,
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
	cmd.Flags().StringVar(&out, "out", "dashboards/json", "folder to write the dashboard files into")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the files written as JSON (docs/json.md) instead of one a line")
	return cmd
}
