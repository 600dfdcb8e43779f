//go:build race

package dashboards

// scrapeSeconds is Prometheus's scrape interval in the query test. Under
// the race detector /metrics takes over a second to render (1.4 s
// measured on 2 loaded cores), past a 1 s scrape's timeout.
const scrapeSeconds = 3
