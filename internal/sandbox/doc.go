// Package sandbox runs the JavaScript an agent writes each turn ("code as
// action", docs/ARCHITECTURE.md §3) and reports what happened. It owns
// the JavaScript runtime (it is the only importer of goja; no goja type
// crosses its API), the primitives scripts call (log, answer, fetch,
// http, ai, markdown, ...) with their TypeScript declarations, the policy
// check every host call passes, the network guard, and the per-turn
// limits. It knows nothing of runs, queues, stores or models beyond the
// agentfleet domain types: the caller hands it an agentfleet.ExecRequest
// (with an AIFunc it meters) and gets an agentfleet.ExecResult.
//
// # The child-process hook: every importing binary is also a sandbox
//
// Scripts do not run in the caller's process. goja has no memory limit,
// and one huge allocation ('x'.repeat(2**36)) makes the Go runtime die with
// "fatal error: runtime: out of memory", which no recover() catches. So a
// Pool keeps a pool of sandbox processes and re-executes its own binary
// (os.Executable, or Config.Executable) as each of them, with the
// environment variable AGENTFLEET_SANDBOX_CHILD_V1 set. An init function in
// this package sees the variable, serves the parent and exits: main (or
// the test runner) never runs. Hence:
//
//   - Any binary that imports this package - the worker, agentctl, every
//     test binary - can act as a sandbox process. Nothing needs to be built
//     or shipped separately.
//   - Packages initialized before this one run their init functions in the
//     child too; they must not depend on the environment (the child's holds
//     only the marker), files (its working directory is /) or the network.
//   - Nothing may print to the child's stdout expecting it to matter: the
//     protocol runs on fds 3 (requests), 4 (replies) and 5 (cancels); stdout
//     is discarded and the head of stderr is kept for crash reports.
//
// On Linux a sandbox process also runs with no_new_privs on every thread
// (it is forked from a thread of the pool that has it), no core dumps,
// RLIMIT_NOFILE 32, an RLIMIT_NPROC that stops a fork bomb (see
// limitResources for why it cannot be tighter), hard limits lowered with
// the soft ones, and the highest OOM score, so that a machine or cgroup
// short of memory loses a sandbox process rather than the worker.
//
// # Kernel confinement
//
// goja is not the only wall: a sandbox process runs as the worker's user,
// so code that escaped the JavaScript runtime could otherwise read the
// worker's /proc/<pid>/environ (provider key, database URL) and the data
// directory (signing key, admin token). Once started (limits set, pipes
// and zone file open), a process confines itself on every thread
// (confine_linux.go), before it reads its first request:
//
//   - Landlock, where the kernel has it (Linux 5.13+, enabled at boot):
//     no file system access at all and no TCP bind or connect (UDP too
//     from ABI 10), abstract unix sockets scoped to the process, and
//     signals too from ABI 8 (with one domain for all threads; before it,
//     go-landlock applies the ruleset thread by thread, and scoping
//     signals would break the Go runtime's preemption). Missing, the
//     process says so and the pool logs it once.
//   - A seccomp filter (required; synchronized to all threads with
//     TSYNC): an allow-list of what the Go runtime and the child's loop
//     use (seccompAllowed), every other system call failing with EPERM.
//     No open or stat of any path, no socket, no exec, no ptrace or
//     process_vm_readv; clone for threads only (no fork), signals to
//     itself only, prctl only to name memory. This alone keeps files,
//     the parent's environ and the network out of reach where Landlock
//     is missing. A process that cannot install it exits and the pool
//     reports the error rather than run scripts unconfined.
//
// Off Linux there is neither; production runs on Linux. Tests show each
// protection from inside a real process (confine_linux_test.go: a hook
// compiled only into the test binary gives its scripts Go code that
// tries to open files, sockets and processes).
//
// # The process pool
//
// A Pool runs JavaScript in PoolSize processes at once (default
// 2*GOMAXPROCS), started lazily by the first Execute that finds none idle
// and then reused turn after turn. A script waiting on a host call (fetch,
// http, ai) keeps its process but gives up its place, and takes one again
// when the call returns, so turns that mostly wait on the network overlap
// in up to MaxProcesses processes while no more than PoolSize compute.
// Execute waits (honouring its context) for a place and, beyond
// MaxProcesses, for a process. Processes beyond PoolSize are stopped
// after IdleTimeout idle. Their memory together is bounded by
// Config.MemoryTotal (by default three quarters or so of the cgroup's
// memory limit, see DefaultMemoryTotal): each live process is charged
// ProcessMemory, the most it can hold under RLIMIT_AS, and an Execute that
// needs another process while that would pass the bound waits for one to
// go idle or end, so that the worker is not the one the kernel's OOM
// killer finds. A process that dies or is killed is reaped and
// replaced on demand; Close kills and reaps them all. Each turn runs in a fresh goja runtime, built
// by the process between turns, so nothing a script does - globals,
// patched prototypes, replaced builtins - is visible to any later turn,
// run or tenant. Requests and results travel as compact binary frames, one
// write each, over blocking pipes: a warm round trip costs tens of
// microseconds on top of the script itself.
//
// # Limits (Limits)
//
//   - CPU time: the script may run JavaScript for Limits.CPUTime. This is
//     the CPU time of the sandbox process (getrusage), not counting host
//     calls (fetch, ai): a turn that waits ten seconds on a model has not
//     used ten seconds of CPU, and neither has one that waited for a core
//     on a busy worker. The process interrupts the script itself (kind
//     timeout) and stays usable; if it fails to report within a grace
//     period of CPU time (a long native call such as a catastrophic
//     regexp does not see interrupts) the parent, reading the process's
//     CPU time from /proc, kills it. Limits.TurnTimeout bounds the whole
//     turn in wall time, host calls included (a script looping on ai()
//     or on slow fetches); a host function that ignores its context is
//     given up a grace after it, and the turn ends.
//   - Memory: a process sets RLIMIT_AS to what it has mapped at start plus
//     room for the turn's heap (Linux only), asks the GC to stay under
//     Limits.MemoryBytes, and samples its heap every few milliseconds while
//     a script runs. Gradual growth is interrupted cleanly once the heap
//     passes the bound, or a collection finds live data above 7/8 of it
//     (kind memory; the process survives). A single allocation too large
//     for the address-space limit kills the process; the parent recognizes
//     the out-of-memory exit, reports kind memory and replaces the process.
//     The bound is approximate by nature: it is the heap of the process, of
//     which the script's data is nearly all.
//   - Output: log output is capped at Limits.LogBytes (head and tail kept,
//     the cut marked); run()'s return value and answer()'s value at
//     Limits.CarryBytes of JSON (kind limit, with a message telling the
//     model to return less), and at 10000 levels of nesting, the most
//     the next turn (and encoding/json) reads; fetched bodies at
//     Limits.FetchMaxBytes (truncated and flagged).
//   - Cancellation: cancelling Execute's context interrupts the script
//     (kind cancelled), killing the process if it does not stop in time.
//
// # Carried state
//
// The carried args reach run() as JSON.parse would make them - ordinary
// objects and arrays, keys in document order, a duplicate key's last
// value, -0 and lone surrogates (\ud800) kept, numbers beyond float64
// Infinity - but from a parser of this package (jsonparse.go), not from
// goja's JSON.parse, which costs several times as much (it goes through
// encoding/json's Token API). The args travel once from the request frame
// into a string that the parsed strings share. A name with a lone
// surrogate becomes U+FFFD, as goja's Go API takes names as UTF-8. The
// same parser reads JSON the primitives hand to scripts (fetch's json(),
// aiJSON, markdown); scripts' own JSON.parse is goja's.
//
// run()'s return value and answer()'s are serialized with goja's
// JSON.stringify, captured before the script runs. A writer of our own
// was measured and was not clearly faster (see toJSON).
//
// # Results and errors
//
// Execute returns an error only when the sandbox itself fails: a process
// cannot be started, the pool is closed, or the request names an unknown
// primitive. Everything a script does is an ExecResult whose Err says what
// went wrong in words fit for the model - the JavaScript error with its
// line:column, never a Go stack or goja internals. A process that crashes
// for a reason other than memory fails the turn with "sandbox process
// crashed". Values listed in ExecRequest.Secrets are replaced by
// "[redacted]", and those of the tenant's secrets (TenantSecrets,
// Credentials) by "[secret:<name>]" (internal/redact), in logs, return
// value, answer and error message (also where the log or message cap
// cuts one in two), in fetch and http responses before the script or
// the journal sees them, in approval previews, and in a crashed
// process's stderr before it is logged; text shaped like a common
// credential (ghp_..., sk-..., AKIA..., PEM private keys) becomes
// "[redacted]" in logs and answers. The parent redacts what a process
// reports: no secret is ever sent to a sandbox process, but the value
// of an exposed credential its script asks for with secret(name).
//
// # Credentials
//
// ExecRequest.Credentials are the secrets the run's agent names. The
// parent sets each one's header (its format with {value} replaced) on
// the fetch and http requests over HTTPS to one of its hosts, at send
// time: after the egress check, the policy and the approvals, which see
// the request as the script made it, as do the journal and the script
// (a header of the same name the script set is replaced). Plain http
// gets no credential, and a redirect carries one only to its hosts over
// HTTPS (credentials.go). secret(name) is defined when the agent names
// secrets, and returns the value of an exposed one; it is declared to
// the model when one is exposed (Declarations).
//
// # Primitives, policy, network guard
//
// log, console, answer, assert and help are always defined: they are the
// turn protocol. The others (parseUrl, fetch, http, markdown,
// htmlToMarkdown, ai, aiJSON; see DefaultPrimitives) are defined only when
// listed in ExecRequest.Primitives (nil: all), and Declarations describes
// exactly what a given list defines. Pure primitives run in the sandbox
// process. Host primitives (fetch, http, ai, aiJSON) are executed by the
// parent, which is asked by the process over the pipe; each call passes
// exactly one Policy.Check there. A Deny reaches the script as a
// catchable PolicyError; uncaught, the turn fails with kind denied. A call
// that matches the agent's approve rules (ExecRequest.Approve; policy.go),
// or that the Policy says NeedsApproval for, asks ExecRequest.Approval
// where its approval stands: approved, it proceeds; denied, it throws a
// PolicyError with the reason; pending, the turn stops there, uncatchably
// (no catch, no finally), and ExecResult.Approval says what it waits for.
// Host calls are numbered per turn (Call.Index), so the same script run
// again meets the same call at the same index.
//
// The side-effecting host calls (fetch and http other than GET and HEAD,
// ai, aiJSON, spawn) are numbered per turn in call order and, given
// ExecRequest.Journal, replayed from it or recorded in it before the
// script sees their outcome (journal.go); the HTTP ones carry
// Idempotency-Key <run>/<turn>/<number>.
//
// # OpenAPI modules
//
// ExecRequest.OpenAPI are the agent's OpenAPI 3 documents (openapi.go):
// require('api:<name>') has one function per operation, and a call is a
// host call (api) that the parent resolves from the document, compiled
// once per content, into the HTTP request it makes. From there it is a
// fetch: the egress guard, the Policy (which sees it as fetch), the
// approve rules (api:<name>.<operation>, api:<name>.*, and the HTTP
// rules by method and URL), the journal (non-GET operations, recorded
// as api:<name>.<operation>) and the credentials. Each call is told to
// ExecRequest.ToolEvent as tool_call and tool_result events, redacted
// and cut (toolevents.go). CheckOpenAPIModules validates an agent's
// documents; OpenAPIDeclarations is their lines of the prompt.
//
// # MCP servers
//
// ExecRequest.MCP are the agent's MCP servers (mcprun.go): the pool
// lists their tools before the turn takes a process, through its
// mcp.Cache (created by New, closed by Close), and require('mcp:<name>')
// has one function per allowed tool, by name and camelCase alias. A call
// is a host call (mcp) the parent makes through the cache, over the
// egress guard of the agent's egress, the server's secret added only
// over HTTPS to the secret's hosts. It passes the Policy (primitive
// mcp:<server>.<tool>), the approve rules (mcp:<server>.<tool>,
// mcp:<server>.*; a readOnlyHint tool only when named exactly) and, for
// a tool without readOnlyHint, the journal; it is told as tool_call and
// tool_result events. The value back is the structured content, else
// the text; isError throws its text. CheckMCPServers and CheckMCPSecrets
// validate an agent's servers; MCPDeclarations is their prompt lines.
//
// fetch and http only reach public http(s) addresses: loopback, private,
// link-local, CGNAT, multicast, unspecified, broadcast, reserved and cloud
// metadata addresses are refused, in the URL (including non-canonical forms
// such as 127.1 or [::ffff:7f00:1]) and, decisively, on the resolved
// address at connect time, which covers DNS rebinding and redirects (at
// most NetworkConfig.MaxRedirects). Only NetworkConfig.Allow and
// AllowHosts, set by the operator, open a blocked range (loopback
// included), and ExecRequest.Egress, the run's agent's egress (on a
// transport of its own per egress list, egress.go), a private one;
// NetworkConfig.DenyPrivate closes them all; nothing opens a cloud
// metadata address; no script and no Policy can open one. The guard
// itself is internal/egress, which the dispatcher's callbacks dial
// through too.
package sandbox
