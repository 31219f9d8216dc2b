"""Readers of the image classification sets (STUDY.md, experiment 4): raw bytes, never unpickling.

Pixels are mapped to [-1, 1] and flattened; each data set keeps its own train/test partition
(``Table.test_mask``). Stored as float32: 60-70K images of float64 would not be compact.
"""

import tarfile
from pathlib import Path

import numpy as np

from gpstudy.data.dataset import DataError, Table

IDX_MAGIC = {2049: 1, 2051: 3}  # IDX magic number -> number of dimensions (labels, images)
CIFAR10_BATCHES = tuple(f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST_BATCH = "cifar-10-batches-bin/test_batch.bin"
CIFAR10_RECORD = 1 + 32 * 32 * 3  # one label byte, then 3072 pixel bytes (R, G, B planes)


def to_unit_interval(pixels: np.ndarray) -> np.ndarray:
    """Map uint8 pixels to float32 in [-1, 1]."""
    return (pixels.astype(np.float32) / 127.5 - 1.0).reshape(len(pixels), -1)


def read_idx(path: Path) -> np.ndarray:
    """Read an uncompressed IDX file (MNIST's format) of unsigned bytes."""
    data = path.read_bytes()
    magic = int.from_bytes(data[:4], "big")
    if magic not in IDX_MAGIC:
        raise DataError(f"{path}: not an IDX file of unsigned bytes (magic number {magic:#x})")
    ndim = IDX_MAGIC[magic]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != np.prod(shape):
        raise DataError(
            f"{path}: header promises {shape} ({np.prod(shape)} bytes), file holds {body.size}"
            f" (truncated at item {body.size // max(1, int(np.prod(shape[1:])))})"
        )
    return body.reshape(shape)


def read_mnist(raw: Path) -> Table:
    """MNIST: 60K training then 10K test images of 784 pixels, labels 0-9."""
    parts = [
        (read_idx(raw / f"{prefix}-images.idx3-ubyte"), read_idx(raw / f"{prefix}-labels.idx1-ubyte"))
        for prefix in ("train", "t10k")
    ]
    for (images, labels), prefix in zip(parts, ("train", "t10k")):
        if len(images) != len(labels):
            raise DataError(f"{raw}: {prefix} has {len(images)} images but {len(labels)} labels")
    return _images_table(parts)


def read_cifar10(raw: Path) -> Table:
    """CIFAR10, binary version: five training batches then the test batch, 3072 pixels, labels 0-9."""
    source = raw / "cifar-10-binary.tar.gz"
    parts = []
    with tarfile.open(source, "r:gz") as archive:
        for member in (*CIFAR10_BATCHES, CIFAR10_TEST_BATCH):
            try:
                data = np.frombuffer(archive.extractfile(member).read(), dtype=np.uint8)
            except KeyError as error:
                raise DataError(f"{source}: member {member} missing") from error
            if data.size % CIFAR10_RECORD:
                raise DataError(
                    f"{source}:{member}: {data.size} bytes is not a whole number of "
                    f"{CIFAR10_RECORD}-byte records (truncated after record {data.size // CIFAR10_RECORD})"
                )
            records = data.reshape(-1, CIFAR10_RECORD)
            parts.append((records[:, 1:], records[:, 0]))
    train = (np.concatenate([p[0] for p in parts[:-1]]), np.concatenate([p[1] for p in parts[:-1]]))
    return _images_table([train, parts[-1]])


def _images_table(parts: list[tuple[np.ndarray, np.ndarray]]) -> Table:
    """Stack (train, test) image/label pairs into one table with a test mask."""
    (train_x, train_y), (test_x, test_y) = parts
    return Table(
        x=to_unit_interval(np.concatenate([train_x, test_x])),
        y=np.concatenate([train_y, test_y]).astype(np.int64),
        test_mask=np.r_[np.zeros(len(train_y), bool), np.ones(len(test_y), bool)],
    )
