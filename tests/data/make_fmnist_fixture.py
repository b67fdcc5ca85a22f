#!/usr/bin/env python3
"""Writes the tiny Fashion-MNIST fixture used by tests/idx_reader_test.cc.

Takes the first N images and labels of the real training set (Debian package
dataset-fashion-mnist) and writes them as gzip IDX files next to this script.
gzip's mtime is fixed at 0 so rerunning the script reproduces the files byte for byte.
Prints the facts the test hard-codes (labels, pixel sum, pixel checksum).
"""
import gzip
import os
import struct
import sys
import zlib

SRC = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
N = 16
HERE = os.path.dirname(os.path.abspath(__file__))


def read_head(path, nbytes):
    with gzip.open(path, "rb") as f:
        return f.read(nbytes)


def write_gz(path, data):
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(data)


images = read_head(os.path.join(SRC, "train-images-idx3-ubyte.gz"), 16 + N * 784)
labels = read_head(os.path.join(SRC, "train-labels-idx1-ubyte.gz"), 8 + N)
magic, count, rows, cols = struct.unpack(">IIII", images[:16])
assert (magic, rows, cols) == (0x803, 28, 28), (hex(magic), rows, cols)
magic, count = struct.unpack(">II", labels[:8])
assert magic == 0x801, hex(magic)

pixels = images[16:]
write_gz(os.path.join(HERE, "fmnist-16-images-idx3-ubyte.gz"),
         struct.pack(">IIII", 0x803, N, 28, 28) + pixels)
write_gz(os.path.join(HERE, "fmnist-16-labels-idx1-ubyte.gz"),
         struct.pack(">II", 0x801, N) + labels[8:])

print("labels:", list(labels[8:]))
print("pixel sum:", sum(pixels))
print("pixel crc32: 0x%08x" % zlib.crc32(pixels))
print("image 0 pixel (row 14, col 14):", pixels[14 * 28 + 14])
