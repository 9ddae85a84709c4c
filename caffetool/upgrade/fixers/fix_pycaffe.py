"""pycaffe's helpers as BVLC Caffe renamed them in 2014-2015 (the mode and device became module
functions; a net's phase became an argument of its constructor).

* ``net.set_mode_cpu()``, ``net.set_mode_gpu()``, ``net.set_device(n)`` on a net or a classifier are
  the module's ``caffe.set_mode_cpu()`` ... (they always set the whole process's mode);
* ``caffe.Net(model, weights)`` needs its phase: ``caffe.Net(model, weights, caffe.TEST)``, the
  phase such scripts ran nets in;
* ``set_phase_test()``/``set_phase_train()`` and the preprocessing setters of the old ``caffe.Net``
  (``set_mean``, ``set_raw_scale``, ``set_channel_swap``, ``set_input_scale``) have no one-line
  equivalent (the phase is the constructor's; preprocessing is ``caffe.io.Transformer``'s): they
  are reported, by line, and left as they are — the setters only in a file that has no
  ``Transformer``, whose own setters have the same names.
"""

from fissix import fixer_base
from fissix.fixer_util import Comma, Name
from fissix.pgen2 import token
from fissix.pygram import python_symbols as syms
from fissix.pytree import Leaf, Node

MODULE_FUNCTIONS = ("set_mode_cpu", "set_mode_gpu", "set_device")
REPORTED = {
    "set_phase_test": "the phase is given to caffe.Net(model, weights, caffe.TEST) now",
    "set_phase_train": "the phase is given to caffe.Net(model, weights, caffe.TRAIN) now",
    "set_mean": "preprocessing is caffe.io.Transformer's now: transformer.set_mean('data', mean)",
    "set_raw_scale": "preprocessing is caffe.io.Transformer's now: transformer.set_raw_scale('data', scale)",
    "set_channel_swap": "preprocessing is caffe.io.Transformer's now: transformer.set_channel_swap('data', order)",
    "set_input_scale": "preprocessing is caffe.io.Transformer's now: transformer.set_input_scale('data', scale)",
}
_METHODS = " | ".join(f"'{n}'" for n in (*MODULE_FUNCTIONS, *REPORTED))


class FixPycaffe(fixer_base.BaseFix):
    BM_compatible = True
    PATTERN = f"""
    net=power< 'caffe' trailer< '.' 'Net' > trailer< '(' arglist< any ',' any > ')' > >
    |
    method=power< any+ trailer< '.' name=({_METHODS}) > trailer< '(' any* ')' > any* >
    """

    def start_tree(self, tree, filename):
        super().start_tree(tree, filename)
        # Today's caffe.io.Transformer has setters of the same names and arguments: a file that uses
        # it is taken to call those.
        self.transformer = "Transformer" in str(tree)

    def transform(self, node, results):
        if "net" in results:
            return self._with_phase(node)
        name = results["name"][0]
        trailer = name.parent
        at = node.children.index(trailer)
        receiver = "".join(str(c) for c in node.children[:at]).strip()
        if name.value in REPORTED:
            if not (self.transformer and name.value.startswith("set_") and "phase" not in name.value):
                self.warning(node, f"{name.value}(): {REPORTED[name.value]}")
            return None
        if receiver == "caffe":
            return None
        prefix = node.prefix  # the comments and indentation before the statement: the receiver's, removed next
        for child in node.children[:at]:
            child.remove()
        node.insert_child(0, Name("caffe", prefix=prefix))
        return None

    def _with_phase(self, node):
        args = node.children[2].children[1]
        if any(c.type == syms.argument for c in args.children):
            return None
        second = str(args.children[2]).strip()
        if second.endswith(("TEST", "TRAIN")):  # caffe.Net(model, caffe.TEST): today's form already
            return None
        phase = Node(syms.power, [Name("caffe", prefix=" "), Node(syms.trailer, [Leaf(token.DOT, "."), Name("TEST")])])
        args.append_child(Comma())
        args.append_child(phase)
        return None
