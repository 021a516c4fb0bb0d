package sandbox

import (
	"context"
	"testing"

	"github.com/agentfleet/agentfleet"
)

// BenchmarkExecute measures whole turns through a warm pool of one
// process: request frame, fresh runtime, compile, run, result frame.
func BenchmarkExecute(b *testing.B) {
	cases := []struct {
		name, script, args string
	}{
		{"tiny", `function run(args) { log("turn", args.n); return {n: args.n + 1} }`, `{"n":1}`},
		{"carry200", `function run(args) {
  const items = [];
  for (let i = 0; i < 200; i++) items.push({id: i, name: "item " + i, price: i * 1.25, tags: ["a" + i % 7, "b" + i % 3]});
  return {items};
}`, `null`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(Config{PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			req := agentfleet.ExecRequest{Script: c.script, Args: []byte(c.args), Tenant: "t", RunID: "r"}
			ctx := context.Background()
			// Start the process outside the measurement.
			if res, err := p.Execute(ctx, req); err != nil || res.Err != nil {
				b.Fatalf("warm-up: %v %v", err, res.Err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := p.Execute(ctx, req)
				if err != nil || res.Err != nil {
					b.Fatalf("%v %v", err, res.Err)
				}
			}
		})
	}
}
