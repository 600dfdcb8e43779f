// Command trace-any-service is a small shop of three services, traced
// only with the OpenTelemetry SDK and the contrib otelhttp and otelgrpc
// instrumentations (no amdahl attribute anywhere), whose trace file
// amdahl report reads like any OTLP file.
//
// frontend serves GET /checkout: it fetches the cart's items from cart
// (HTTP) three at a time in parallel, then asks db (gRPC) for the order,
// a serial database-like call. Each service has its own TracerProvider
// and resource (service.name), as three processes would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	out      string
	requests int
	items    int
	cart, db time.Duration
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace-any-service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.out, "out", "trace.jsonl", "write the services' spans here (OTLP JSON, as the Collector's file exporter)")
	fs.IntVar(&c.requests, "requests", 40, "checkouts to make, one after another")
	fs.IntVar(&c.items, "items", 6, "items per cart, fetched three at a time")
	fs.DurationVar(&c.cart, "cart-delay", 2*time.Millisecond, "cart's time per item")
	fs.DurationVar(&c.db, "db-delay", 4*time.Millisecond, "db's time per order")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.requests < 1 || c.items < 1 {
		fmt.Fprintln(stderr, "trace-any-service: --requests and --items must be at least 1")
		return 2
	}
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(stderr, "trace-any-service:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d checkouts traced to %s\nread them with: go run ./cmd/amdahl report %s\n", c.requests, c.out, c.out)
	return 0
}

// sharedExporter lets three providers write one file: it is shut down
// once, after them.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }

func provider(exp sdktrace.SpanExporter, service string) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.instance.id", service+"-1"))
	return sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(sharedExporter{exp}))
}

func run(ctx context.Context, c config) (err error) {
	exp, err := otelsetup.NewTraceFileExporter(c.out)
	if err != nil {
		return err
	}
	front, cart, db := provider(exp, "frontend"), provider(exp, "cart"), provider(exp, "db")
	defer func() {
		for _, tp := range []*sdktrace.TracerProvider{front, cart, db} {
			err = errors.Join(err, tp.Shutdown(context.Background()))
		}
		err = errors.Join(err, exp.Shutdown(context.Background()))
	}()
	prop := propagation.TraceContext{}

	// db: a gRPC service (the health service's Check stands in for a query).
	dbLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	dbSrv := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(db), otelgrpc.WithPropagators(prop))))
	grpc_health_v1.RegisterHealthServer(dbSrv, &query{delay: c.db})
	go dbSrv.Serve(dbLis)
	defer dbSrv.Stop()

	// cart: an HTTP service, one item per request.
	cartLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /item/{id}", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(c.cart)
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})
	cartSrv := &http.Server{Handler: otelhttp.NewHandler(mux, "cart", otelhttp.WithTracerProvider(cart), otelhttp.WithPropagators(prop))}
	go cartSrv.Serve(cartLis)
	defer cartSrv.Close()

	// Clients dial the services by name ("cart", "db"), as in a cluster.
	dial := func(addr string) func(ctx context.Context, _, _ string) (net.Conn, error) {
		return func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	tr := &http.Transport{DialContext: dial(cartLis.Addr().String()), MaxIdleConnsPerHost: 3}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: otelhttp.NewTransport(tr, otelhttp.WithTracerProvider(front), otelhttp.WithPropagators(prop))}
	conn, err := grpc.NewClient("passthrough:///db:5432",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(dbLis.Addr().String())(ctx, "", "") }),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(front), otelgrpc.WithPropagators(prop))))
	if err != nil {
		return err
	}
	defer conn.Close()
	dbc := grpc_health_v1.NewHealthClient(conn)

	// frontend: GET /checkout.
	fmux := http.NewServeMux()
	fmux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) {
		if err := checkout(r.Context(), hc, dbc, c.items); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, "ok\n")
	})
	frontLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	frontSrv := &http.Server{Handler: otelhttp.NewHandler(fmux, "frontend", otelhttp.WithTracerProvider(front), otelhttp.WithPropagators(prop))}
	go frontSrv.Serve(frontLis)
	defer frontSrv.Close()

	// The shoppers: plain HTTP, untraced, so each checkout is a trace's root.
	url := "http://" + frontLis.Addr().String() + "/checkout"
	for range c.requests {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("checkout: %s", resp.Status)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	return nil
}

// checkout fetches the items three at a time, then queries db.
func checkout(ctx context.Context, hc *http.Client, dbc grpc_health_v1.HealthClient, items int) error {
	var wg sync.WaitGroup
	errs := make([]error, items)
	sem := make(chan struct{}, 3)
	for i := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://cart/item/%d", i), nil)
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := dbc.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "orders"})
	return err
}

// query is the db service: every Check takes delay.
type query struct {
	grpc_health_v1.UnimplementedHealthServer
	delay time.Duration
}

func (q *query) Check(context.Context, *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	time.Sleep(q.delay)
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}
