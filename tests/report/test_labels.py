"""Display names: the registered methods' from their registration, in plot order, the config's variants' labels
after them, a registered method's name wherever it is registered, and the paper's names of data sets."""

from unittest import mock

from gpstudy.methods import METHODS, SVGP
from gpstudy.report.labels import dataset_label, display_names, method_label
from gpstudy.report.tables import in_order
from gpstudy.study import variant_labels

SHOWN = {
    "svgp": "SVGP",
    "gpnet": "GPNet",
    "fbnn": "FBNN",
    "exact": "Exact GP",
    "odvgp": "ODVGP",
    "autogp": "AutoGP",
}  # what the tables and figures print, in plot order: a change here changes them


def test_the_registered_methods_are_shown_by_these_names_in_this_order():
    assert list(display_names().items()) == list(SHOWN.items())


def test_the_configs_variants_follow_by_their_labels(study_config):
    names = display_names(variant_labels(study_config))
    assert list(names)[len(SHOWN) :] == list(study_config["variants"])  # every variant of the study has a label
    assert names["orthnat"] == "ORTHNAT" and method_label("orthnat", 300, names) == "ORTHNAT 300"
    assert display_names({"svgp": "Sparse GP"})["svgp"] == "Sparse GP"  # a variant's label is what it says


def test_a_method_registered_later_is_shown_by_its_display_name_after_the_others():
    class FixedSVGP(SVGP):
        name, display_name = "svgp_fixed", "SVGP fixed Z"

    with mock.patch.dict(METHODS, {FixedSVGP.name: FixedSVGP}):
        names = display_names({"orth": "ORTH"})
        assert list(names)[-2:] == ["svgp_fixed", "orth"] and method_label("svgp_fixed", 20, names) == "SVGP fixed Z 20"
        assert in_order(["orth", "svgp_fixed", "zzz", "exact", "svgp"], names) == [  # Figure 4's rows
            "svgp",
            "exact",
            "svgp_fixed",
            "orth",
            "zzz",
        ]
    assert "svgp_fixed" not in display_names()


def test_a_name_without_a_display_name_is_shown_as_its_key():
    assert method_label("mystery", 5, display_names()) == "mystery 5"
    assert (dataset_label("wine_red"), dataset_label("mnist"), dataset_label("mydata")) == ("Wine", "MNIST", "mydata")
