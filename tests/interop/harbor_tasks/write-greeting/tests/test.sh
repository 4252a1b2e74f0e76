#!/bin/bash
# Harbor's convention: the verifier writes its reward to /logs/verifier/reward.txt.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "greeting.txt is missing or wrong"
    echo 0 > /logs/verifier/reward.txt
fi
