#!/bin/bash
# Two named rewards in reward.json; `reward` is the primary one.
cd /app
if python3 check_calc.py && [ "$(python3 -c 'from calc import add; print(add(2, 3))')" = "$EXPECTED" ]; then
    echo '{"reward": 1.0, "tests_passed": 1}' > /logs/verifier/reward.json
else
    echo '{"reward": 0.0, "tests_passed": 0}' > /logs/verifier/reward.json
fi
