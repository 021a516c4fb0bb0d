package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// A Go service submits a run with its tenant's API key, follows its
// events as they happen, and reads the answer once it has ended.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := client.New("http://localhost:8080", os.Getenv("AGENTFLEET_API_KEY"))

	run, err := c.CreateRun(ctx, wire.RunCreateRequest{
		Message: "Sum the totals of the attached invoices",
		Context: []byte(`{"invoices":[{"total":120},{"total":80}]}`),
		// A retry with the same key answers the same run.
		IdempotencyKey: "invoices-2026-01",
	})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.RunEvents(ctx, run.ID, 0) {
		if err != nil {
			log.Fatal(err) // ctx ended, or the API refused the stream
		}
		fmt.Printf("turn %d: %s %s\n", ev.Turn, ev.Type, ev.Summary)
	}
	run, err = c.GetRun(ctx, run.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Status, string(run.Answer))
}
