// Command worker executes turns: it pulls them from NATS one per free
// slot, runs each (one model call, then the script in a sandbox process),
// commits it to the store and publishes the next. It keeps no state
// between turns; run as many as the load needs.
//
// Configuration is the environment docs/configuration.md lists: AGENTFLEET_NATS_URL
// (required), AGENTFLEET_DATABASE_URL (unset: SQLite in
// AGENTFLEET_DATA_DIR, for a single-host fleet), AGENTFLEET_WORKER_SLOTS,
// AGENTFLEET_SANDBOX_PROCESSES (default: the slots, at most 64),
// AGENTFLEET_METRICS_LISTEN, AGENTFLEET_MODEL, OPENAI_BASE_URL,
// OPENAI_API_KEY, AGENTFLEET_MAX_WAITING and AGENTFLEET_EVENTS_MAX_AGE
// (as the dispatcher's).
//
// SIGTERM drains: the worker stops pulling, lets in-flight turns finish
// within AGENTFLEET_DRAIN_TIMEOUT (default 30s), hands back the rest, and
// exits 0. The work is fleet.RunWorker, which `agentctl __serve worker`
// also runs.
package main

import "github.com/agentfleet/agentfleet/internal/fleet"

func main() { fleet.Main("worker", fleet.RunWorker) }
