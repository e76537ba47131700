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
// (with user:password@ for an ACL user); for TLS, wrap the socket with node:tls. SELECT is sent only for a
// database other than 0: a client's ACL login (`modelplan client add`) may not run it. A run that cannot
// go on (bad arguments, Redis unreachable or refusing, no answer in time) says why in one line, exit 2.
import net from "node:net";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const USAGE = `usage: node examples/node/modelplan.mjs --job-id ID --request FILE [--redis-url URL] [--client-id ID]
                                          [--prefix PREFIX] [--release] [--timeout SECONDS]

Submits the serve request in FILE as job ID, prints each change of the job until it is placed (or failed,
or the entry refused), then releases it with --release.

  --redis-url URL    redis://[user:password@]host:port/db (default redis://127.0.0.1:6379/0)
  --client-id ID     act through this registered client's own stream (modelplan client add ID)
  --prefix PREFIX    modelplan's key prefix (default modelplan)
  --release          release the job once it is placed
  --timeout SECONDS  how long to wait for each answer and change (default 60)
  -h, --help         this text
`;

// One line on standard error, then out: what went wrong, never a stack trace.
function fail(message) {
  process.stderr.write(`modelplan.mjs: ${message}\n`);
  process.exit(2);
}

let opt;
try {
  ({ values: opt } = parseArgs({
    options: {
      "redis-url": { type: "string", default: "redis://127.0.0.1:6379/0" },
      prefix: { type: "string", default: "modelplan" },
      "job-id": { type: "string" },
      "client-id": { type: "string" },
      request: { type: "string" },
      release: { type: "boolean", default: false },
      timeout: { type: "string", default: "60" },
      help: { type: "boolean", short: "h", default: false },
    },
  }));
} catch (e) {
  fail(`${e.message}; see --help`);
}
if (opt.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (!opt["job-id"]) fail("--job-id ID is required; see --help");
if (!opt.request) fail("--request FILE is required; see --help");
if (!(Number(opt.timeout) > 0)) fail(`--timeout ${opt.timeout}: a number of seconds above 0; see --help`);

// --- RESP: one command at a time, replies parsed from what has arrived ----------------------------------
class Redis {
  constructor(url) {
    let u;
    try {
      u = new URL(url);
    } catch {
      fail(`--redis-url ${url}: not a URL; see --help`);
    }
    if (u.protocol !== "redis:") fail(`--redis-url: a redis:// URL, not ${u.protocol}//; see --help`);
    this.shown = url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:****@"); // for messages: the password masked
    this.failed = null;
    this.sock = net.connect(Number(u.port || 6379), u.hostname);
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    this.sock.on("data", (d) => { this.buf = Buffer.concat([this.buf, d]); this.drain(); });
    this.sock.on("error", (e) => this.lost(new Error(`cannot reach Redis at ${this.shown}: ${e.message}`)));
    this.sock.on("close", () => this.lost(new Error(`Redis at ${this.shown} closed the connection`)));
    this.auth = u.password ? [decodeURIComponent(u.username || "default"), decodeURIComponent(u.password)] : null;
    this.db = u.pathname.replace(/\//g, "") || "0";
  }
  async init() {
    if (this.auth) await this.call("AUTH", ...this.auth);
    if (this.db !== "0") await this.call("SELECT", this.db); // a client's ACL login may not: db 0 needs none
  }
  lost(error) {
    this.failed ??= error;
    for (const w of this.waiting.splice(0)) w.reject(this.failed);
  }
  call(...args) {
    if (this.failed) return Promise.reject(this.failed);
    const parts = args.map(String).map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`);
    this.sock.write(`*${args.length}\r\n${parts.join("")}`);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject, command: String(args[0]) }));
  }
  drain() {
    while (this.waiting.length) {
      const got = parse(this.buf, 0);
      if (!got) return;
      this.buf = this.buf.subarray(got.end);
      const w = this.waiting.shift();
      if (got.value instanceof Error) {
        w.reject(new Error(`Redis at ${this.shown} refused ${w.command}: ${got.value.message}`));
      } else {
        w.resolve(got.value);
      }
    }
  }
  close() {
    this.failed ??= new Error("closed");
    this.sock.end();
  }
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

async function main() {
  let request;
  try {
    request = readFileSync(opt.request, "utf8");
  } catch (e) {
    fail(`--request ${opt.request}: cannot be read (${e.code || e.message})`);
  }
  const r = new Redis(opt["redis-url"]);
  await r.init();
  const jobId = opt["job-id"];
  const deadline = Date.now() + Number(opt.timeout) * 1000;
  let sent = await send(r, "op", "submit", "job_id", jobId, "request", request);
  if (!(await answered(r, sent, deadline))) return 1;
  let { last, state } = await follow(r, jobId, "0", ["placed", "failed"], deadline);
  if (state === "placed" && opt.release) {
    sent = await send(r, "op", "release", "job_id", jobId);
    if (!(await answered(r, sent, deadline))) return 1;
    ({ state } = await follow(r, jobId, last, ["released"], deadline));
  }
  r.close();
  return state === "failed" ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => fail(e.message));
