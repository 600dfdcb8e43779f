package main

import (
	"fmt"

	"github.com/amdahl-rt/amdahl/dashboards"
	"github.com/spf13/cobra"
)

func newDashboardsCmd() *cobra.Command {
	var out string
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
			for _, p := range paths {
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), p); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "dashboards/json", "folder to write the dashboard files into")
	return cmd
}
