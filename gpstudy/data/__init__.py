"""Data sets: registry, checksummed fetching, readers, splits."""

from gpstudy.data.dataset import DataError, Table, load_table, save_table
from gpstudy.data.fetch import ChecksumError, FetchError, FileSpec, Source, fetch_file
from gpstudy.data.prepare import fetch_dataset, prepare_split, prepare_table, split_of_table
from gpstudy.data.registry import DATASETS, PROTOCOLS, Dataset, get_dataset
from gpstudy.data.split import Split, load_split, make_split, non_finite, read_table, save_split, split_rows

__all__ = [
    "ChecksumError",
    "DATASETS",
    "DataError",
    "Dataset",
    "FetchError",
    "FileSpec",
    "PROTOCOLS",
    "Source",
    "Split",
    "Table",
    "fetch_dataset",
    "fetch_file",
    "get_dataset",
    "load_split",
    "load_table",
    "make_split",
    "non_finite",
    "prepare_split",
    "prepare_table",
    "read_table",
    "save_split",
    "save_table",
    "split_of_table",
    "split_rows",
]
