// Run an OpenCode plugin file's hooks under plain Node, as OpenCode 1.18.33 calls them
// (binary bundle: `trigger("tool.execute.after", {tool, sessionID, callID, args}, V)`
// with one mutable output object), and report what they left in `output`.
//
//   node opencode_driver.mjs PLUGIN_FILE < steps.json > report.json
//
// Each step is {"hook": "tool.execute.after", "input": {...}, "output": {...}}.
// The file is imported from a data: URL, so it is ESM whatever its directory holds.
import { readFileSync } from "node:fs";

const [pluginFile] = process.argv.slice(2);
const source = readFileSync(pluginFile, "utf8");
const plugin = await import(
  `data:text/javascript;base64,${Buffer.from(source).toString("base64")}`
);
// OpenCode's loader: every export must be a plugin function (else a TypeError).
const exports = Object.fromEntries(
  Object.entries(plugin).map(([name, value]) => [name, typeof value]),
);
const hooks = {};
for (const factory of Object.values(plugin)) {
  if (typeof factory === "function") Object.assign(hooks, await factory({}));
}

// readFileSync(0) fails with EAGAIN on a large piped stdin: read it as a stream.
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const steps = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const results = [];
for (const step of steps) {
  const hook = hooks[step.hook];
  let threw = null;
  try {
    if (hook) await hook(step.input, step.output);
  } catch (error) {
    threw = String(error);
  }
  results.push({ output: step.output, threw });
}
process.stdout.write(JSON.stringify({ exports, hooks: Object.keys(hooks), results }));
