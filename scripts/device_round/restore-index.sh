#!/usr/bin/env bash
# After a device round: git's index back to HEAD (data/ tracked again) and the round's ignore lines gone.
set -euo pipefail
cd "$(dirname "$0")/../.."
git reset -q
sed -i '/^\/data\/\(drafts\|distill\|bench\)\/$/d' .git/info/exclude
git status --short | head
