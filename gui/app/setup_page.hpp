// Set up: the plan form (PlanFormModel) as widgets. Every edit goes to the model, which
// validates at once; the broken rule appears under the fields it names (red) or as one message
// at the bottom. Fields the model changes itself (a run preset, a cluster filling hardware and
// GPUs) are written back without echoing.
#pragma once

#include <QWidget>
#include <array>

#include "gui/core/plan_form_model.hpp"

class QComboBox;
class QLabel;
class QLineEdit;
class QCheckBox;
class QFormLayout;

namespace pipetune::gui {

class SetupPage : public QWidget {
  Q_OBJECT
 public:
  explicit SetupPage(PlanFormModel* form, QWidget* parent = nullptr);

  // The editor of a field (a QLineEdit, QComboBox or QCheckBox) and its inline error label.
  QWidget* editor(PlanField field) const { return editors_[static_cast<std::size_t>(field)]; }
  QLabel* error_label(PlanField field) const { return errors_[static_cast<std::size_t>(field)]; }
  QLabel* message_label() const { return message_; }

 private:
  void sync_from_model();
  void add_row(QFormLayout* layout, PlanField field, const QString& label, QWidget* editor);

  PlanFormModel* form_;
  std::array<QWidget*, kPlanFieldCount> editors_{};
  std::array<QLabel*, kPlanFieldCount> errors_{};
  QLabel* message_ = nullptr;
  QComboBox* run_presets_ = nullptr;
  QComboBox* purpose_ = nullptr;
  bool syncing_ = false;
};

}  // namespace pipetune::gui
