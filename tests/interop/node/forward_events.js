// The events every Forward interop script sends; tests/interop/test_forward_*.py computes the same list.
"use strict";

function forwardEvent(i) {
  return {
    epoch: 1700000000 + i,
    nano: (i * 7919 + 123) % 1000000000,
    record: { i: i, msg: "héllo wörld " + i, nested: { list: [i, "x"], flag: i % 2 === 0 } },
  };
}

module.exports = { forwardEvent };
