// make bench's pg-boss peer: N jobs enqueued, then fetched and completed by 16 workers, in
// batches of B (1: `send`, `fetch({batchSize: 1})`, `complete(id)`; B > 1: `insert` of B
// jobs, `fetch({batchSize: B})`, `complete(ids)`).
//
//   node pgboss.mjs <connection string> <jobs> <concurrency> [<batch size, default 1>]
//
// A measured child of benchmarks/cpu.py, keeping its protocol: after the warm-up it prints
// `ready` and waits for a line on stdin; then it runs both halves and prints one JSON line,
// jobs per second for the whole job (enqueue, fetch, complete: the counterpart of our claim →
// markSendStarted → finalize) and for each half; then it holds its connections until its
// stdin closes. The CPU of that window (this process's and PostgreSQL's) is counted by
// whoever runs it (benchmarks/side_by_side.py). pg-boss creates its schema in the database
// given (make bench creates it and drops it after).
import { createInterface } from "node:readline";
import { PgBoss } from "pg-boss";

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const [url, jobsArg, concurrencyArg, batchArg = "1"] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const batchSize = Number(batchArg);
const queue = "bench";

const boss = new PgBoss({
  connectionString: url,
  max: concurrency,
  schedule: false,
  supervise: false,
});
boss.on("error", (error) => {
  console.error(error);
  process.exitCode = 1;
});
await boss.start();
if (!(await boss.getQueue(queue))) await boss.createQueue(queue);

// `count` jobs enqueued by `concurrency` concurrent senders, `batchSize` jobs a call.
async function enqueue(count) {
  let next = 0;
  const sender = async () => {
    while (next < count) {
      const size = Math.min(batchSize, count - next);
      next += size;
      if (batchSize === 1) await boss.send(queue, { payload: "bench" });
      else await boss.insert(queue, Array.from({ length: size }, () => ({ data: { payload: "bench" } })));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, sender));
}

// `concurrency` workers fetch up to `batchSize` jobs and complete them, until the queue is
// empty (every job was enqueued before, so an empty fetch means the rest are held by others).
let completed = 0;
async function drain() {
  const worker = async () => {
    for (;;) {
      const fetched = await boss.fetch(queue, { batchSize });
      if (fetched.length === 0) return;
      await boss.complete(
        queue,
        fetched.map((job) => job.id),
      );
      completed += fetched.length;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

// Warm-up: a few jobs through both halves, not timed.
await enqueue(5);
await drain();
completed = 0;

console.log("ready");
await stdin.next();
const t0 = performance.now();
await enqueue(jobs);
const t1 = performance.now();
await drain();
const t2 = performance.now();
if (completed !== jobs) throw new Error(`completed ${completed} of ${jobs}`);
console.log(
  JSON.stringify({
    jobs,
    concurrency,
    batch_size: batchSize,
    jobs_per_s: (jobs * 1000) / (t2 - t0),
    send_per_s: (jobs * 1000) / (t1 - t0),
    fetch_complete_per_s: (jobs * 1000) / (t2 - t1),
  }),
);
while (!(await stdin.next()).done);
await boss.stop({ graceful: false, close: true });
