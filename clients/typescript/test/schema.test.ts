// The drift check CI runs (scripts/check-schema.mjs): it passes on the
// committed types and fails, naming the difference, when the document
// changes without them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// dist/test/schema.test.js -> clients/typescript
const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const script = join(pkg, "scripts", "check-schema.mjs");
const doc = join(pkg, "..", "..", "internal", "api", "openapi.json");

function check(...args: string[]) {
  return spawnSync(process.execPath, [script, ...args], { encoding: "utf8" });
}

test("the committed types match the OpenAPI document", () => {
  const r = check();
  assert.equal(r.status, 0, r.stderr);
});

test("a document changed without regenerating the types fails the check", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "agentfleet-drift-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const spec = JSON.parse(readFileSync(doc, "utf8"));
  spec.components.schemas.Event.properties.drift_probe = { type: "string", description: "A field the types lack." };
  const changed = join(dir, "openapi.json");
  writeFileSync(changed, JSON.stringify(spec));
  const r = check(changed, join(pkg, "src", "schema.ts"));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /is not what .* generates \(first difference at line \d+\)/);
  assert.match(r.stderr, /drift_probe|A field the types lack/);
  assert.match(r.stderr, /npm run generate/);
});
