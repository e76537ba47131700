// modelplan from Node, with no package: a few lines of RESP over a socket, a request stream to act, a
// reply stream for each entry's answer and the job's own stream to watch. Submits a job, prints each change
// until it is placed (or failed, or the entry refused), then releases it when --release is given.
//
//   node examples/node/modelplan.mjs --redis-url redis://127.0.0.1:6379/0 --client-id svc-b --job-id node-1 \
//        --request examples/requests/llama-3.1-8b-instruct.json --release
//
// With --client-id (registered by the operator: `modelplan client add svc-b`), entries go to the client's
// own stream and its answers come on its own replies stream; without it, to the shared stream, naming the
// job id as the reply stream.
//
// The request file is a serve request as `modelplan schema request` describes it. Plain redis:// URLs
// (with user:password@ for an ACL user); for TLS, wrap the socket with node:tls.
import net from "node:net";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    "redis-url": { type: "string", default: "redis://127.0.0.1:6379/0" },
    prefix: { type: "string", default: "modelplan" },
    "job-id": { type: "string" },
    "client-id": { type: "string" },
    request: { type: "string" },
    release: { type: "boolean", default: false },
    timeout: { type: "string", default: "60" },
  },
});

// --- RESP: one command at a time, replies parsed from what has arrived ----------------------------------
class Redis {
  constructor(url) {
    const u = new URL(url);
    this.sock = net.connect(Number(u.port || 6379), u.hostname);
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    this.sock.on("data", (d) => { this.buf = Buffer.concat([this.buf, d]); this.drain(); });
    this.sock.on("error", (e) => { for (const w of this.waiting.splice(0)) w.reject(e); });
    this.auth = u.password ? [decodeURIComponent(u.username || "default"), decodeURIComponent(u.password)] : null;
    this.db = u.pathname.replace(/\//g, "") || "0";
  }
  async init() {
    if (this.auth) await this.call("AUTH", ...this.auth);
    await this.call("SELECT", this.db);
  }
  call(...args) {
    const parts = args.map(String).map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`);
    this.sock.write(`*${args.length}\r\n${parts.join("")}`);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
  drain() {
    while (this.waiting.length) {
      const got = parse(this.buf, 0);
      if (!got) return;
      this.buf = this.buf.subarray(got.end);
      const w = this.waiting.shift();
      got.value instanceof Error ? w.reject(got.value) : w.resolve(got.value);
    }
  }
  close() { this.sock.end(); }
}

function parse(buf, at) {
  const eol = buf.indexOf("\r\n", at);
  if (eol < 0) return null;
  const kind = String.fromCharCode(buf[at]);
  const line = buf.toString("utf8", at + 1, eol);
  const next = eol + 2;
  if (kind === "+") return { value: line, end: next };
  if (kind === "-") return { value: new Error(line), end: next };
  if (kind === ":") return { value: Number(line), end: next };
  if (kind === "$") {
    const n = Number(line);
    if (n < 0) return { value: null, end: next };
    if (buf.length < next + n + 2) return null;
    return { value: buf.toString("utf8", next, next + n), end: next + n + 2 };
  }
  if (kind === "*") {
    const n = Number(line);
    if (n < 0) return { value: null, end: next };
    const items = [];
    let end = next;
    for (let i = 0; i < n; i++) {
      const item = parse(buf, end);
      if (!item) return null;
      items.push(item.value);
      end = item.end;
    }
    return { value: items, end };
  }
  throw new Error(`unexpected reply ${kind}`);
}

const fields = (flat) => Object.fromEntries(flat.flatMap((v, i) => (i % 2 ? [] : [[v, flat[i + 1]]])));

const client = opt["client-id"];
const requests = client ? `${opt.prefix}:client:${client}:requests` : `${opt.prefix}:requests`;
const replies = client ? `${opt.prefix}:client:${client}:replies` : `${opt.prefix}:reply:${opt["job-id"]}`;

// Append an entry: its id, and the replies stream's last id before it (no answer to it comes before that).
async function send(r, ...fieldsAndValues) {
  const last = await r.call("XREVRANGE", replies, "+", "-", "COUNT", "1");
  const replyTo = client ? [] : ["reply_to", opt["job-id"]];
  const entry = await r.call("XADD", requests, "*", ...fieldsAndValues, ...replyTo);
  return { entry, replied: last.length ? last[0][0] : "0-0" };
}

// Wait for the entry's answer on the replies stream: a refusal is printed, and ends the run.
async function answered(r, sent, deadline) {
  let replied = sent.replied;
  while (Date.now() < deadline) {
    const got = await r.call("XREAD", "COUNT", "100", "BLOCK", "1000", "STREAMS", replies, replied);
    for (const [id, flat] of got ? got[0][1] : []) {
      replied = id;
      const e = fields(flat);
      if (e.request !== sent.entry) continue;
      if (e.ok === "true") return true;
      console.log(`${e.job_id} refused ${e.reason}`);
      return false;
    }
  }
  throw new Error(`no answer within ${opt.timeout} s: is the client registered (modelplan client add)?`);
}

// Follow the job's stream from `last` until one of `until` arrives; returns the last id.
async function follow(r, jobId, last, until, deadline) {
  const stream = `${opt.prefix}:job:${jobId}:events`;
  while (Date.now() < deadline) {
    const got = await r.call("XREAD", "COUNT", "100", "BLOCK", "1000", "STREAMS", stream, last);
    for (const [id, flat] of got ? got[0][1] : []) {
      last = id;
      const e = fields(flat);
      console.log(`${e.job_id} ${e.state} ${e.reason}`);
      if (until.includes(e.state)) return { last, state: e.state };
    }
  }
  throw new Error(`no ${until.join(" or ")} within ${opt.timeout} s`);
}

const r = new Redis(opt["redis-url"]);
await r.init();
const jobId = opt["job-id"];
const deadline = Date.now() + Number(opt.timeout) * 1000;
const request = readFileSync(opt.request, "utf8");
let sent = await send(r, "op", "submit", "job_id", jobId, "request", request);
if (!(await answered(r, sent, deadline))) process.exit(1);
let { last, state } = await follow(r, jobId, "0", ["placed", "failed"], deadline);
if (state === "placed" && opt.release) {
  sent = await send(r, "op", "release", "job_id", jobId);
  if (!(await answered(r, sent, deadline))) process.exit(1);
  ({ state } = await follow(r, jobId, last, ["released"], deadline));
}
r.close();
process.exit(state === "failed" ? 1 : 0);
