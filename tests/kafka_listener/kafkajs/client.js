// kafkajs driven by tests/kafka_listener/test_kafkajs.py; prints one JSON document.
//   node client.js produce BOOTSTRAP TOPIC COUNT ACKS IDEMPOTENT
//     -> [{partition, offset}] of each record produced (acks 0: none)
//   node client.js group BOOTSTRAP TOPIC GROUP MEMBERS COUNT
//     -> {members: [[partition, ...], ...], records: [{partition, offset, key, value, header}]}
//        MEMBERS consumers of GROUP join (the later joins rebalance the group); once each
//        holds partitions, COUNT keyed records are produced, which they read between
//        them; they commit and leave.
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const [mode, bootstrap, topic, ...rest] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'laketail-tests', brokers: bootstrap.split(','), logLevel: process.env.KAFKAJS_LOG ? logLevel.INFO : logLevel.NOTHING });

async function produce(count, acks, idempotent, partitioned = true) {
  const producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : undefined });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < count; i++) {
    messages.push({ key: `k-${i}`, value: `v-${i}`, headers: { n: `${i}` }, partition: partitioned ? 0 : undefined });
  }
  const answers = await producer.send({ topic, acks, messages });
  await producer.disconnect();
  return answers.map((a) => ({ partition: a.partition, offset: a.baseOffset }));
}

async function group(groupId, members, count) {
  const records = [];
  const assigned = [];
  const consumers = [];
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  for (let m = 0; m < members; m++) {
    const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 });
    assigned.push([]);
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      assigned[m] = (e.payload.memberAssignment[topic] || []).slice().sort();
    });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    consumers.push(consumer);
  }
  for (const consumer of consumers) {
    await consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        records.push({ partition, offset: Number(message.offset), key: message.key.toString(),
          value: message.value.toString(), header: message.headers.n.toString() });
        if (records.length >= count) done();
      },
    });
  }
  // the second member's join rebalances the group: wait until both hold partitions
  while (members > 1 && assigned.some((a) => a.length === 0)) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await produce(count, -1, false, false);
  await all;
  for (const consumer of consumers) {
    await consumer.disconnect(); // commits what was read
  }
  return { members: assigned, records };
}

async function main() {
  let out;
  if (mode === 'produce') {
    out = await produce(Number(rest[0]), Number(rest[1]), rest[2] === 'true');
  } else if (mode === 'group') {
    out = await group(rest[0], Number(rest[1]), Number(rest[2]));
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  process.stdout.write(JSON.stringify(out));
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
