// Starts a real fleet for the tests: `agentctl dev` with the offline
// demo model, on free ports (the API, embedded NATS and metrics all on
// 127.0.0.1:0) and a temporary data directory, so it never meets another
// fleet on the machine. AGENTFLEET_AGENTCTL names the binary (.ci/run
// builds it); without it the harness builds one with `go build`.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export interface DevFleet {
  url: string;
  adminToken: string;
  tenantKey: string;
  /** Stops the fleet (SIGTERM, then SIGKILL after 20 s) and removes its data. */
  stop(): Promise<void>;
}

// dist/test/dev-fleet.js -> the repository's root.
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

function agentctl(dir: string): string {
  const given = process.env["AGENTFLEET_AGENTCTL"];
  if (given) return given;
  const bin = join(dir, "agentctl");
  execFileSync("go", ["build", "-o", bin, "./cmd/agentctl"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
  return bin;
}

export async function startDevFleet(): Promise<DevFleet> {
  const dir = mkdtempSync(join(tmpdir(), "agentfleet-ts-"));
  const bin = agentctl(dir);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    // The fleet's own settings (a real model, Postgres, NATS) must not
    // leak in from the caller's environment: the tests want dev mode's
    // defaults and the demo model.
    if (v !== undefined && !k.startsWith("AGENTFLEET_") && !k.startsWith("OPENAI_")) env[k] = v;
  }
  Object.assign(env, {
    AGENTFLEET_LISTEN: "127.0.0.1:0",
    AGENTFLEET_NATS_LISTEN: "127.0.0.1:0",
    AGENTFLEET_METRICS_LISTEN: "127.0.0.1:0",
    AGENTFLEET_DATA_DIR: join(dir, "data"),
    AGENTFLEET_WORKERS: "1",
    AGENTFLEET_WORKER_SLOTS: "4",
  });
  const child = spawn(bin, ["dev"], { env, stdio: ["ignore", "pipe", "pipe"] });
  const killOnExit = () => child.kill("SIGKILL");
  process.on("exit", killOnExit);
  let out = "";
  let errOut = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => { errOut += s; });
  let spawnError = "";
  const exited = new Promise<number | null>((res) => {
    child.on("exit", (code) => res(code));
    // A binary that cannot be started never exits: say why instead.
    child.on("error", (err) => {
      spawnError = `${bin}: ${err.message}`;
      res(null);
    });
  });
  const cleanup = () => {
    process.off("exit", killOnExit);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const url = await new Promise<string>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`agentctl dev did not print its API URL in 60 s; stderr:\n${errOut}`)), 60_000);
      child.stdout!.setEncoding("utf8").on("data", (s: string) => {
        out += s;
        const m = /^\s*API\s+(http:\/\/\S+)/m.exec(out);
        if (m) {
          clearTimeout(timer);
          res(m[1]!);
        }
      });
      void exited.then((code) => {
        clearTimeout(timer);
        rej(new Error(spawnError || `agentctl dev exited (${code}) before it was ready; stderr:\n${errOut}`));
      });
    });
    await waitReady(url);
    const data = join(dir, "data");
    return {
      url,
      adminToken: readFileSync(join(data, "admin-token"), "utf8").trim(),
      tenantKey: readFileSync(join(data, "dev-tenant-key"), "utf8").trim(),
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGTERM");
          const t = setTimeout(() => child.kill("SIGKILL"), 20_000);
          await exited;
          clearTimeout(t);
        }
        cleanup();
      },
    };
  } catch (err) {
    if (child.exitCode === null && child.signalCode === null && !spawnError) {
      child.kill("SIGKILL");
      await exited;
    }
    cleanup();
    throw err;
  }
}

async function waitReady(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.ok) return;
      last = `HTTP ${res.status} ${await res.text()}`;
    } catch (err) {
      last = String(err);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url}/readyz did not answer 200 in 30 s: ${last}`);
}
