// Package bench owns `agentctl bench`: it measures a fleet and finds its
// limits. A bench starts an OpenAI-wire fake model in this process
// (llm/fakeserver, with configurable latency, reported token counts and
// injected 429/500 failures) whose replies play a bench task: a script per
// turn that counts the turns in the carried state and answers "done <i>
// <turns>" on the last, so every run's answer proves each of its turns
// ran once, in order, with the state the previous one returned.
//
// The fleet under test is one of:
//   - embedded (default): fleet.StartDev in this process — embedded NATS
//     and SQLite in a temp dir, or Postgres (a fresh schema) and/or an
//     external NATS server;
//   - processes (--spawn, and always for chaos): a NATS server, a
//     dispatcher and workers as separate processes of this same binary,
//     re-executed in a hidden role (ServeRole: `agentctl __serve
//     nats|dispatcher|worker`, the code of cmd/dispatcher and cmd/worker),
//     on Postgres — production's shape without needing Go or nats-server
//     on the machine;
//   - an existing fleet (--url with its admin token), whose workers the
//     user points at the fake model's printed URL.
//
// The bench drives the fleet as a user does, through the HTTP API with
// tenants of its own, and reads its store directly where it can (run
// counts, traces). It knows nothing of the fleet's insides beyond what
// fleet assembles: no worker, scheduler or bus internals.
//
// Scenarios: throughput (runs/s and turns/s on an instant model, CPU per
// turn), latency (per-step latencies on an idle fleet, as percentiles),
// scale (thousands of turns in flight on a slow model: completion and
// memory per in-flight turn), fairness (one tenant's few runs against
// another's backlog), chaos (a worker SIGKILLed, the NATS server
// restarted and then SIGKILLed, Postgres restarted, the dispatcher
// SIGKILLed mid-submission, all mid-load: nothing lost, nothing committed
// twice), webhooks (a burst of signed GitHub deliveries to one trigger:
// accepted per second and request-to-202 percentiles, with a fleet of
// processes' workers stopped so the intake is measured alone, then the
// runs the burst started), session (one session's runs one after
// another: each run's prompts and summary calls as the fake model
// received them, and a run carrying a 200-item list between its turns:
// the prompt characters it sends). Each returns a Report of figures and checks;
// a check that fails makes the command exit non-zero. Checks marked
// timing compare with a bound that depends on the machine; the others hold at any speed, which is what the package's
// tests assert (a test asserts behaviour; a bench reports figures).
//
// CPU is getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN) plus the
// times of the live descendants read from /proc (RUSAGE_CHILDREN holds
// only reaped children, and the sandbox processes live as long as the
// fleet); context switches are counted the same way (getrusage, and the
// threads of the live descendants from /proc/<pid>/task): where a
// context switch is dear, as on some virtual machines, they explain CPU
// per turn that the code alone does not. Memory is VmRSS of this process
// and its live descendants. All are Linux-only and cover only a fleet
// the bench runs.
package bench
