"""Training steps of Hugging Face `transformers` TF models: third-party model code.

Every corpus graph is built by this project's own code from `tf_keras` or
Keras 3 layers. These builders trace model code nobody here wrote, as a user
of `transformers` would run it: BERT-base as a masked language model, GPT-2
small as a causal one, T5-small as an encoder-decoder (the labels are the
source; the model shifts them into the decoder's inputs) and ViT-base as an
image classifier, each from its library's default configuration with random
weights (nothing is downloaded), the model's own loss, and `tf_keras` Adam
with its slots built before the step is traced. They are for information
(not a corpus family, not used in training or in the tests).

`transformers` is not a dependency: only its 4.x releases carry TF model code
(checked with 4.46.3; `pip install "transformers<5"`).
"""

from tf_gdp import errors
from tf_gdp.corpus import training_steps

# name -> (model class, config class, batch, sequence length or image size,
# settings the default configuration lacks: T5's published checkpoints start
# the decoder at the padding token, which its default configuration leaves out)
_MODELS = {
    "hf_bert_base": ("TFBertForMaskedLM", "BertConfig", 16, 128, {}),
    "hf_gpt2_small": ("TFGPT2LMHeadModel", "GPT2Config", 8, 256, {}),
    "hf_vit_base": ("TFViTForImageClassification", "ViTConfig", 16, 224, {}),
    "hf_t5_small": ("TFT5ForConditionalGeneration", "T5Config", 16, 128,
                    {"decoder_start_token_id": 0}),
}


def require_library() -> None:
  """InputError, saying what to install, unless `transformers` imports."""
  _transformers()


def _transformers():
  try:
    import transformers  # pylint: disable=g-import-not-at-top
    return transformers
  except ImportError as e:
    raise errors.InputError(
        "the hf_* graphs need Hugging Face transformers with its TF models: "
        f'pip install "transformers<5" ({e})') from e


def _inputs(tf, name: str, batch: int, size: int) -> dict:
  """Inputs and labels of one step (ids of 1: a fixed, valid token)."""
  if name == "hf_vit_base":
    return {"pixel_values": tf.ones([batch, 3, size, size]),
            "labels": tf.zeros([batch], tf.int32)}
  ids = tf.ones([batch, size], tf.int32)
  return {"input_ids": ids, "labels": ids}


def _builder(name: str):
  model_class, config_class, batch, size, settings = _MODELS[name]

  def build():
    tf, tf_keras = training_steps.libraries()
    library = _transformers()
    model = getattr(library, model_class)(
        getattr(library, config_class)(**settings))
    inputs = _inputs(tf, name, batch, size)
    model(**{key: value[:1] for key, value in inputs.items()})  # builds
    variables = model.trainable_variables
    optimizer = tf_keras.optimizers.Adam(1e-4)
    optimizer.build(variables)

    @tf.function
    def step():
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(**inputs, training=True).loss)
      optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
      return loss

    return step

  build.__doc__ = (f"transformers {model_class} training step, default "
                   f"config, batch {batch}, "
                   + ("image " if name == "hf_vit_base" else "length ")
                   + f"{size}.")
  return build


BUILDERS = {name: _builder(name) for name in _MODELS}
