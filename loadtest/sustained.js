// k6 sustained scenario: a constant arrival rate on one API key, three times the
// refill rate. Expected: after the initial burst of `capacity`, 200s arrive at the
// refill rate, so over the run the allowed count is C + R*T (never more) and the
// allowed rate converges to R; the rest are 429s.
//
// Run it against the load-test gateway (limit "sustained": capacity 10, refill 50/s):
//   scripts/run loadtest/conf/loadtest.yaml          # terminal 1: sluice on 127.0.0.1:8080
//   k6 run loadtest/sustained.js                     # terminal 2 (30 s)
// Other gateway or limits: k6 run -e BASE_URL=... -e CAPACITY=10 -e RATE=50 -e DURATION=30 \
//   -e OFFERED=150 loadtest/sustained.js
// The hey twin, runnable without k6 and drawing the chart: loadtest/sustained.sh.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const CAPACITY = Number(__ENV.CAPACITY || 10);
const RATE = Number(__ENV.RATE || 50);
const DURATION = Number(__ENV.DURATION || 30);
const OFFERED = Number(__ENV.OFFERED || 3 * RATE);
// k6's counter rate divides by the whole test time (a little more than DURATION).
const SLACK_SECONDS = 3;

const allowed = new Counter('allowed');
const denied = new Counter('denied');
const unexpected = new Counter('unexpected_status');

http.setResponseCallback(http.expectedStatuses(200, 429));

export const options = {
  scenarios: {
    sustained: {
      executor: 'constant-arrival-rate',
      rate: OFFERED,
      timeUnit: '1s',
      duration: `${DURATION}s`,
      preAllocatedVUs: 20,
      maxVUs: 100,
    },
  },
  thresholds: {
    // Never more than the bucket allows: C + R*T (T bounded by the run time).
    allowed: [
      `count<=${Math.ceil(CAPACITY + RATE * (DURATION + SLACK_SECONDS))}`,
      // ... and the limit does not starve the caller: the 200 rate reaches R.
      `rate>=${0.9 * RATE}`,
      `rate<=${RATE + CAPACITY / DURATION + 0.05 * RATE}`,
    ],
    denied: ['count>0'],
    unexpected_status: ['count==0'],
    http_req_failed: ['rate==0'],
    checks: ['rate==1'],
    dropped_iterations: [`count<${Math.ceil(0.01 * OFFERED * DURATION)}`],
  },
};

export function setup() {
  // count==0 thresholds need the metric to have a sample.
  unexpected.add(0);
  return { key: `k6-sustained-${Date.now()}-${Math.floor(Math.random() * 1e9)}` };
}

export default function (data) {
  const res = http.get(`${BASE_URL}/sustained`, { headers: { 'X-API-Key': data.key } });
  if (res.status === 200) {
    allowed.add(1);
  } else if (res.status === 429) {
    denied.add(1);
    check(res, { 'denied: Retry-After >= 1': (r) => Number(r.headers['Retry-After']) >= 1 });
  } else {
    unexpected.add(1);
  }
}
