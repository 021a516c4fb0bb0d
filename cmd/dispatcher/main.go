// Command dispatcher serves agentfleet's HTTP API, runs the fair scheduler
// and the budget keeper, and sweeps for runs due a turn that have no turn
// message in NATS. It admits and publishes runs; it never calls a model.
// Run any number of them against one NATS server and one Postgres; a NATS
// lease picks the one that schedules.
//
// Configuration is the environment docs/configuration.md lists: AGENTFLEET_LISTEN,
// AGENTFLEET_METRICS_LISTEN (/metrics, kept off the API port: default
// 127.0.0.1:9463), AGENTFLEET_ADMIN_TOKEN, AGENTFLEET_DATABASE_URL, AGENTFLEET_NATS_URL
// (unset: an embedded NATS server listening on AGENTFLEET_NATS_LISTEN, for
// a single-host fleet), AGENTFLEET_DATA_DIR, AGENTFLEET_MAX_WAITING
// (the workers' pull requests that may wait at once, default 4096) and
// AGENTFLEET_EVENTS_MAX_AGE (how long NATS keeps run events, default 7d),
// each the same on every process of a fleet, and
// AGENTFLEET_STRANDED_INTERVAL and AGENTFLEET_STRANDED_AFTER (the sweep:
// how often it looks, default 30s, and how long a run must have been
// unchanged, default 1m). The work is
// fleet.RunDispatcher, which `agentctl __serve dispatcher` also runs.
package main

import "github.com/agentfleet/agentfleet/internal/fleet"

func main() { fleet.Main("dispatcher", fleet.RunDispatcher) }
