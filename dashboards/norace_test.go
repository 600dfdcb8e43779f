//go:build !race

package dashboards

// scrapeSeconds is Prometheus's scrape interval in the query test.
const scrapeSeconds = 1
