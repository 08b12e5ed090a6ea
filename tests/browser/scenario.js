// What a stomp.js application does against wiremq, run in Node (run_node.js) and in
// headless Chromium (page.html): connect with a login, subscribe with
// client-individual acknowledgements, send with receipts, ack each message, send and
// receive a binary body, stay idle while heart-beats flow both ways, and meet a
// permission refusal. Resolves with what it saw; the Python test checks it, and the
// server's side of it.

export async function run(StompJs, url, options) {
  const { login, passcode, queue, forbidden, count, heartbeat, idleMs } = options;
  const seen = {
    bodies: [],
    binary: null,
    receipts: [],
    serverHeartbeats: 0,
    clientHeartbeats: 0,
    idleHeartbeats: 0,
    error: null,
    closedCleanly: null,
    log: [],
  };
  const client = new StompJs.Client({
    brokerURL: url,
    connectHeaders: { login, passcode },
    heartbeatIncoming: heartbeat,
    heartbeatOutgoing: heartbeat,
    reconnectDelay: 0,
    debug: (line) => {
      if (line === ">>> PING") seen.clientHeartbeats += 1;
      if (seen.log.length < 200) seen.log.push(line.slice(0, 200));
    },
  });
  client.onHeartbeatReceived = () => {
    seen.serverHeartbeats += 1;
  };
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const connected = new Promise((resolve, reject) => {
    client.onConnect = (frame) => resolve(frame);
    client.onWebSocketError = () => reject(new Error("websocket error"));
  });
  const failed = new Promise((resolve) => {
    client.onStompError = (frame) => resolve(frame);
  });
  const closed = new Promise((resolve) => {
    client.onWebSocketClose = (event) => resolve(event);
  });
  client.activate();
  const frame = await connected;
  seen.version = frame.headers.version;

  let received;
  const allReceived = new Promise((resolve) => {
    received = resolve;
  });
  client.subscribe(
    queue,
    (message) => {
      if (message.isBinaryBody && message.binaryBody.length && message.binaryBody[0] === 0xff) {
        seen.binary = Array.from(message.binaryBody);
      } else {
        seen.bodies.push(message.body);
      }
      message.ack();
      if (seen.bodies.length === count && seen.binary !== null) received();
    },
    { ack: "client-individual" },
  );
  const receipts = [];
  for (let i = 0; i < count; i++) {
    const receipt = `r-${i}`;
    receipts.push(
      new Promise((resolve) => client.watchForReceipt(receipt, () => resolve(receipt))),
    );
    client.publish({ destination: queue, body: `message ${i} \u00e9`, headers: { receipt } });
  }
  client.publish({
    destination: queue,
    binaryBody: new Uint8Array([0xff, 0x00, 0x01, 0xfe]),
    headers: { "content-type": "application/octet-stream" },
  });
  seen.receipts = await Promise.all(receipts);
  await allReceived;

  // Idle: only heart-beats keep the connection, in both directions.
  const before = seen.serverHeartbeats;
  await sleep(idleMs);
  seen.idleHeartbeats = seen.serverHeartbeats - before;
  seen.connectedAfterIdle = client.connected;

  client.publish({ destination: forbidden, body: "not allowed", headers: { receipt: "no" } });
  const error = await failed;
  seen.error = { message: error.headers.message, receipt: error.headers["receipt-id"] };
  const event = await closed;
  seen.closedCleanly = event.wasClean;
  await client.deactivate();
  return seen;
}
