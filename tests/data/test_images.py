"""Image readers: raw CIFAR10 binary batches in a synthetic archive, IDX files, real MNIST."""

import io
import tarfile

import numpy as np
import pytest

from gpstudy.data import DataError, get_dataset, read_table
from gpstudy.data.images import CIFAR10_BATCHES, CIFAR10_TEST_BATCH, read_cifar10, read_idx


def cifar_archive(path, records_per_batch=3, truncate=False):
    rng = np.random.default_rng(0)
    batches = {}
    with tarfile.open(path, "w:gz") as archive:
        for index, name in enumerate((*CIFAR10_BATCHES, CIFAR10_TEST_BATCH)):
            labels = (np.arange(records_per_batch) + index) % 10
            pixels = rng.integers(0, 256, size=(records_per_batch, 3072), dtype=np.uint8)
            data = np.column_stack([labels.astype(np.uint8), pixels]).tobytes()
            data = data[:-5] if truncate and name == CIFAR10_TEST_BATCH else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
            batches[name] = (labels, pixels)
    return batches


def test_cifar10_binary_reader(tmp_path):
    batches = cifar_archive(tmp_path / "cifar-10-binary.tar.gz")
    table = read_cifar10(tmp_path)
    assert table.x.shape == (18, 3072) and table.x.dtype == np.float32
    assert table.test_mask.sum() == 3 and table.test_mask[-3:].all()
    labels, pixels = batches[CIFAR10_BATCHES[1]]
    np.testing.assert_array_equal(table.y[3:6], labels)
    np.testing.assert_allclose(table.x[3:6], pixels / 127.5 - 1.0, atol=1e-6)
    assert table.x.min() >= -1.0 and table.x.max() <= 1.0


def test_cifar10_truncated_batch_is_reported(tmp_path):
    cifar_archive(tmp_path / "cifar-10-binary.tar.gz", truncate=True)
    with pytest.raises(DataError, match="test_batch.bin.*not a whole number"):
        read_cifar10(tmp_path)


def test_idx_truncated_file_is_reported(tmp_path):
    header = (2051).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in (2, 28, 28))
    (tmp_path / "images").write_bytes(header + bytes(28 * 28 + 10))
    with pytest.raises(DataError, match="truncated"):
        read_idx(tmp_path / "images")


def test_mnist_from_the_real_files(shared_data):
    table = read_table(get_dataset("mnist"), "given", shared_data / "mnist")
    assert table.x.shape == (70000, 784) and table.test_mask.sum() == 10000
    train_pixels = (table.x[:60000] + 1.0) / 2.0
    assert abs(train_pixels.mean() - 0.1306605) < 1e-5 and abs(train_pixels.std() - 0.3081078) < 1e-5
    np.testing.assert_array_equal(np.bincount(table.y[60000:]), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
