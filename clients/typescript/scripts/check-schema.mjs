// CI's drift check: generates the types from internal/api/openapi.json
// into a temporary file, as `npm run generate` does, and fails when they
// differ from the committed src/schema.ts. Two optional arguments name
// another document and types file (the tests use them).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const doc = process.argv[2] ?? join(root, "..", "..", "internal", "api", "openapi.json");
const committed = process.argv[3] ?? join(root, "src", "schema.ts");
const dir = mkdtempSync(join(tmpdir(), "agentfleet-schema-"));
try {
  const fresh = join(dir, "schema.ts");
  execFileSync(process.execPath, [join(root, "node_modules", "openapi-typescript", "bin", "cli.js"), doc, "-o", fresh], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  const want = readFileSync(fresh, "utf8");
  const have = readFileSync(committed, "utf8");
  if (want !== have) {
    const a = have.split("\n"), b = want.split("\n");
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    console.error(`${committed} is not what ${doc} generates (first difference at line ${i + 1}):`);
    console.error(`  committed: ${JSON.stringify(a[i] ?? "<end of file>")}`);
    console.error(`  generated: ${JSON.stringify(b[i] ?? "<end of file>")}`);
    console.error("run `npm run generate` in clients/typescript and commit src/schema.ts");
    process.exit(1);
  }
  console.log(`${committed} matches ${doc}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
