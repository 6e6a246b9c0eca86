// k6 many-keys scenario: thousands of API keys, each well below its own rate,
// and at the same time one hot key far above it. Expected: not one 429 for the
// thousands (nobody is limited below their own rate, whatever the others do),
// while the hot key is held to C + R*T.
//
// Run it against the load-test gateway (limit "many_keys": capacity 10, refill 5/s per key):
//   scripts/run loadtest/conf/loadtest.yaml          # terminal 1: sluice on 127.0.0.1:8080
//   k6 run loadtest/many_keys.js                     # terminal 2 (30 s)
// Other gateway or limits: k6 run -e BASE_URL=... -e KEYS=2000 -e OFFERED=2000 -e CAPACITY=10 \
//   -e RATE=5 -e DURATION=30 loadtest/many_keys.js
// The gateway must list no api_keys.consumers (else unknown keys fall back to the
// client IP and share one bucket). The wrk/hey twin: loadtest/many_keys.sh.
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const KEYS = Number(__ENV.KEYS || 2000);
const OFFERED = Number(__ENV.OFFERED || 2000); // req/s over all keys: 1 req/s per key
const CAPACITY = Number(__ENV.CAPACITY || 10);
const RATE = Number(__ENV.RATE || 5);
const DURATION = Number(__ENV.DURATION || 30);
const HOT_OFFERED = Number(__ENV.HOT_OFFERED || 200);
const SLACK_SECONDS = 3;

const allowed = new Counter('allowed');
const denied = new Counter('denied');
const hotAllowed = new Counter('hot_allowed');
const hotDenied = new Counter('hot_denied');
const unexpected = new Counter('unexpected_status');

http.setResponseCallback(http.expectedStatuses(200, 429));

if (OFFERED / KEYS >= RATE) {
  throw new Error(`OFFERED/KEYS = ${OFFERED / KEYS} req/s per key is not below RATE = ${RATE}`);
}

export const options = {
  scenarios: {
    many_keys: {
      executor: 'constant-arrival-rate',
      exec: 'manyKeys',
      rate: OFFERED,
      timeUnit: '1s',
      duration: `${DURATION}s`,
      preAllocatedVUs: 50,
      maxVUs: 300,
    },
    hot_key: {
      executor: 'constant-arrival-rate',
      exec: 'hotKey',
      rate: HOT_OFFERED,
      timeUnit: '1s',
      duration: `${DURATION}s`,
      preAllocatedVUs: 5,
      maxVUs: 50,
    },
  },
  thresholds: {
    denied: ['count==0'], // no key below its rate is ever limited
    allowed: [`count>${0.9 * OFFERED * DURATION}`],
    hot_allowed: [`count<=${Math.ceil(CAPACITY + RATE * (DURATION + SLACK_SECONDS))}`],
    hot_denied: ['count>0'],
    unexpected_status: ['count==0'],
    http_req_failed: ['rate==0'],
    checks: ['rate==1'],
  },
};

export function setup() {
  // count==0 thresholds need the metric to have a sample.
  unexpected.add(0); denied.add(0);
  return { run: `k6-keys-${Date.now()}-${Math.floor(Math.random() * 1e9)}` };
}

export function manyKeys(data) {
  const key = `${data.run}-${exec.scenario.iterationInTest % KEYS}`;
  const res = http.get(`${BASE_URL}/keys`, { headers: { 'X-API-Key': key } });
  if (res.status === 200) {
    allowed.add(1);
    check(res, {
      'many keys: X-RateLimit-Limit is the capacity':
        (r) => Number(r.headers['X-Ratelimit-Limit']) === CAPACITY,
    });
  } else if (res.status === 429) {
    denied.add(1);
  } else {
    unexpected.add(1);
  }
}

export function hotKey(data) {
  const res = http.get(`${BASE_URL}/keys`, { headers: { 'X-API-Key': `${data.run}-hot` } });
  if (res.status === 200) {
    hotAllowed.add(1);
  } else if (res.status === 429) {
    hotDenied.add(1);
  } else {
    unexpected.add(1);
  }
}
