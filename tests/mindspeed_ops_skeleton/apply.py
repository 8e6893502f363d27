"""python apply.py TREE DEST: this skeleton of MindSpeed-Ops copied to DEST, then TREE (the
output of python -m zgate.mindspeed_ops) applied to it as its MAMBA3_DZDO_README.md says: each
file or folder of its table copied to the same path, each ```python block appended to the
existing file named (in backticks, on its own line) above it. Fails, naming the file, where the
README places a file the tree lacks, leaves a file of the tree unplaced, or names an existing
file the skeleton lacks."""
import os
import re
import shutil
import sys

SKELETON = os.path.dirname(os.path.abspath(__file__))
README = "MAMBA3_DZDO_README.md"
TABLE_ROW = re.compile(r"^\| `([^`]+)` \|", re.M)
APPEND_BLOCK = re.compile(r"^`([^`\n]+)`\n```python\n(.*?)^```$", re.M | re.S)


def apply(tree, dest):
    shutil.copytree(SKELETON, dest, ignore=shutil.ignore_patterns(
        "apply.py", "README.md", "__pycache__"))
    with open(os.path.join(tree, README), encoding="utf-8") as f:
        readme = f.read()
    placed = set()
    for rel in TABLE_ROW.findall(readme):
        src = os.path.join(tree, rel)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, rel), dirs_exist_ok=True)
            placed.update(os.path.relpath(os.path.join(r, f), tree)
                          for r, _, fs in os.walk(src) for f in fs)
        elif os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copyfile(src, os.path.join(dest, rel))
            placed.add(os.path.normpath(rel))
        else:
            raise SystemExit("apply.py: the README places %s, which the tree lacks" % rel)
    every = {os.path.relpath(os.path.join(r, f), tree) for r, _, fs in os.walk(tree) for f in fs}
    unplaced = sorted(every - placed - {README})
    if unplaced:
        raise SystemExit("apply.py: the README places no row for %s" % ", ".join(unplaced))
    blocks = APPEND_BLOCK.findall(readme)
    if not blocks:
        raise SystemExit("apply.py: the README has no lines to append to existing files")
    for rel, lines in blocks:
        path = os.path.join(dest, rel)
        if not os.path.isfile(path):
            raise SystemExit("apply.py: the README appends to %s, which the skeleton lacks" % rel)
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n" + lines)
    return sorted(placed), [rel for rel, _ in blocks]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    files, appended = apply(sys.argv[1], sys.argv[2])
    print("apply.py: %d files copied, lines appended to %s" % (len(files), ", ".join(appended)))
