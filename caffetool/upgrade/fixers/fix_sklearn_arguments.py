"""scikit-learn's renamed arguments, as BVLC's notebooks pass them (``brewing-logreg`` compares
Caffe with ``SGDClassifier(loss='log', n_iter=1000)``).

scikit-learn 0.19 replaced ``n_iter`` with ``max_iter`` in its SGD estimators (removed in 0.21), and
1.1 renamed the ``'log'`` loss ``'log_loss'`` (the old name removed in 1.3): scikit-learn's
release notes of those versions.
"""

from fissix import fixer_base
from fissix.fixer_util import Name, String

ESTIMATORS = ("SGDClassifier", "SGDRegressor", "Perceptron", "PassiveAggressiveClassifier",
              "PassiveAggressiveRegressor")
KEYWORDS = {"n_iter": "max_iter"}
VALUES = {"loss": {"log": "log_loss"}}
_NAMES = " | ".join(f"'{n}'" for n in ESTIMATORS)


class FixSklearnArguments(fixer_base.BaseFix):
    BM_compatible = True
    PATTERN = f"""
    power< any* trailer< '.' ({_NAMES}) > trailer< '(' args=any* ')' > any* >
    |
    power< ({_NAMES}) trailer< '(' args=any* ')' > any* >
    """

    def transform(self, node, results):
        for argument in node.pre_order():
            if argument.type != self.syms.argument or len(argument.children) != 3:
                continue
            keyword, _, value = argument.children
            if keyword.type != self.syms.atom and keyword.value in KEYWORDS:
                keyword.replace(Name(KEYWORDS[keyword.value], prefix=keyword.prefix))
                continue
            renamed = VALUES.get(getattr(keyword, "value", None), {})
            text = str(value).strip()
            if text[:1] in "'\"" and text[1:-1] in renamed:
                quote = text[0]
                value.replace(String(f"{quote}{renamed[text[1:-1]]}{quote}", prefix=value.prefix))
        return None
