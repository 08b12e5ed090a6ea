// Runs scenario.js with the real @stomp/stompjs in Node, over the `ws` WebSocket client.
// Usage: node run_node.js URL OPTIONS_JSON; prints what the scenario saw as JSON.
import * as StompJs from "@stomp/stompjs";
import WebSocket from "ws";
import { run } from "./scenario.js";

Object.assign(globalThis, { WebSocket });
const [url, options] = process.argv.slice(2);
const timeout = setTimeout(() => {
  process.stderr.write("the scenario did not finish in time\n");
  process.exit(2);
}, 60_000);
try {
  const seen = await run(StompJs, url, JSON.parse(options));
  process.stdout.write(JSON.stringify(seen));
  clearTimeout(timeout);
  process.exit(0);
} catch (error) {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
}
