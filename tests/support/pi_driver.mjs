// Load pi extensions with pi's own loader and run tool events through pi's own
// ExtensionRunner and bash tool, as pi's AgentSession does (dist/core/agent-session.js
// `_installAgentToolHooks`, pi-agent-core dist/agent-loop.js), without a model.
//
//   node pi_driver.mjs PACKAGE_DIR CWD AGENT_DIR < steps.json > report.json
//
// PACKAGE_DIR is node_modules/@mariozechner/pi-coding-agent. Each step is one of
//   {"step": "tool_call", "toolName", "input"}           -> {blocked, input}
//   {"step": "tool_result", "toolName", "input", "content", "details", "isError"}
//                                                         -> {patch}
//   {"step": "turn", "input"}    a bash call end to end: tool_call, pi's bash tool
//                                on the (mutated) input, tool_result, the result the
//                                model gets -> {input, executed, final}
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [packageDir, cwd, agentDir] = process.argv.slice(2);
const pi = await import(pathToFileURL(join(packageDir, "dist", "index.js")).href);
const { discoverAndLoadExtensions, ExtensionRunner, SessionManager, ModelRegistry } = pi;
const { AuthStorage, createBashTool, VERSION } = pi;

const loaded = await discoverAndLoadExtensions([], cwd, agentDir);
const runner = new ExtensionRunner(
  loaded.extensions,
  loaded.runtime,
  cwd,
  SessionManager.inMemory(cwd),
  ModelRegistry.inMemory(AuthStorage.inMemory()),
);
const handlerErrors = [];
runner.onError((error) => handlerErrors.push(String(error && error.error ? error.error : error)));

let calls = 0;
async function toolCall(toolName, input) {
  calls += 1;
  const id = `call_${calls}`;
  const blocked = await runner.emitToolCall({ type: "tool_call", toolName, toolCallId: id, input });
  return { id, blocked: blocked ?? null };
}

async function toolResult(id, toolName, input, result, isError) {
  const patch = await runner.emitToolResult({
    type: "tool_result",
    toolName,
    toolCallId: id,
    input,
    content: result.content,
    details: result.details,
    isError,
  });
  return patch ?? null;
}

async function turn(input) {
  const { id, blocked } = await toolCall("bash", input);
  if (blocked && blocked.block) return { input, blocked };
  let executed;
  try {
    const result = await createBashTool(cwd).execute(id, input);
    executed = { content: result.content, details: result.details, isError: false };
  } catch (error) {
    // pi-agent-core's createErrorToolResult
    const message = error instanceof Error ? error.message : String(error);
    executed = { content: [{ type: "text", text: message }], details: {}, isError: true };
  }
  const patch = await toolResult(id, "bash", input, executed, executed.isError);
  const final = patch
    ? {
        content: patch.content ?? executed.content,
        details: patch.details ?? executed.details,
        isError: patch.isError ?? executed.isError,
      }
    : executed;
  return { input, executed, final };
}

// readFileSync(0) fails with EAGAIN on a large piped stdin: read it as a stream.
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const steps = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const results = [];
for (const step of steps) {
  if (step.step === "tool_call") {
    const { blocked } = await toolCall(step.toolName, step.input);
    results.push({ blocked, input: step.input });
  } else if (step.step === "tool_result") {
    const result = { content: step.content, details: step.details };
    results.push({ patch: await toolResult("call_r", step.toolName, step.input, result, !!step.isError) });
  } else if (step.step === "turn") {
    results.push(await turn(step.input));
  } else {
    throw new Error(`unknown step ${JSON.stringify(step.step)}`);
  }
}
process.stdout.write(
  JSON.stringify({
    version: VERSION,
    extensions: loaded.extensions.map((extension) => extension.path),
    errors: loaded.errors,
    handlerErrors,
    results,
  }),
);
